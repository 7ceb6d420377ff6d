// Internal to dist/: the address of this machine on the route to another (Gloo's pairs listen
// there, so that the ranks of other machines reach them through the interface that reaches the
// store, not through whatever the hostname resolves to).
#pragma once

#include <cstdint>
#include <string>

namespace koila::dist {

// The local address a connection to host:port would leave from (no packet is sent: a UDP
// socket connected there, asked its own address); empty when host does not resolve or no
// route reaches it.
std::string local_address_towards(const std::string& host, uint16_t port);

}  // namespace koila::dist
