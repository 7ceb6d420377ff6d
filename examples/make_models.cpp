// Writes the TorchScript models the C example and tests load, made without Python:
//   make_models DIR   ->   DIR/cnn.pt (the CNN of train_cnn.c), DIR/mlp.pt, DIR/tanh_mlp.pt
//   (the MLP with tanh for ReLU, for tests that compare gradients across chunkings),
//   DIR/cnn_dropout.pt (the CNN with dropout 0.3 before its linear layer: a resume is exact
//   only with the random generators saved)
// With Python the same files would come from torch.jit.script(model).save(path).
#include <cstdio>
#include <exception>
#include <string>

#include "scripted_models.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    scripted::cnn(0).save(dir + "/cnn.pt");
    scripted::mlp(0).save(dir + "/mlp.pt");
    scripted::mlp(0, "tanh").save(dir + "/tanh_mlp.pt");
    scripted::cnn(0, 0.3).save(dir + "/cnn_dropout.pt");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_models: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s/cnn.pt, %s/mlp.pt, %s/tanh_mlp.pt and %s/cnn_dropout.pt\n", dir.c_str(), dir.c_str(),
              dir.c_str(), dir.c_str());
  return 0;
}
