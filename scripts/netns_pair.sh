# Two "machines" on this one (sourced; needs root and iproute2): network namespaces joined by a
# veth pair, with addresses that exist only inside them. netns_pair_create sets ns_a, ns_b,
# host_a, host_b, link_a and link_b (each machine's end of the link); netns_pair_remove kills
# what runs inside them and deletes them.
netns_pair_create() {
  local id=$$ net=$((($$ % 200) + 20))
  ns_a=koila-a-$id ns_b=koila-b-$id
  host_a=10.213.$net.1 host_b=10.213.$net.2
  link_a=kv${id}a link_b=kv${id}b
  ip netns add "$ns_a"
  ip netns add "$ns_b"
  ip link add "$link_a" type veth peer name "$link_b"
  ip link set "$link_a" netns "$ns_a"
  ip link set "$link_b" netns "$ns_b"
  ip -n "$ns_a" addr add "$host_a/24" dev "$link_a"
  ip -n "$ns_b" addr add "$host_b/24" dev "$link_b"
  ip -n "$ns_a" link set lo up
  ip -n "$ns_b" link set lo up
  ip -n "$ns_a" link set "$link_a" up
  ip -n "$ns_b" link set "$link_b" up
  ip -n "$ns_a" route get "$host_b" > /dev/null
}

netns_pair_remove() {
  local ns
  for ns in "${ns_a:-}" "${ns_b:-}"; do
    [[ -n $ns ]] || continue
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns delete "$ns" 2> /dev/null || true
  done
}
