// A program outside the ccc tree, built against an installed ccc: the same allreduce over 4 host
// ranks through ccc::Communicator and through the C API. Exits 1 unless both are right.
#include <cstdio>
#include <exception>
#include <vector>

#include <ccc/ccc.h>
#include <ccc/communicator.h>

namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 1000;
constexpr float kSum = 1 + 2 + 3 + 4;  // rank r contributes r + 1

using RankBuffers = std::vector<std::vector<float>>;

RankBuffers rank_inputs() {
  RankBuffers buffers;
  for (int r = 0; r < kRanks; ++r) buffers.emplace_back(kCount, static_cast<float>(r + 1));
  return buffers;
}

int count_wrong(const RankBuffers& buffers) {
  int wrong = 0;
  for (const auto& buffer : buffers)
    for (float x : buffer) wrong += x != kSum;
  return wrong;
}

// In place: each rank's buffer is its input and its output.
int all_reduce_communicator() {
  RankBuffers buffers = rank_inputs();
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (auto& buffer : buffers) {
    send.push_back(buffer.data());
    recv.push_back(buffer.data());
  }
  auto comm = ccc::Communicator::host(kRanks);
  comm.all_reduce(send, recv, kCount, ccc::DataType::F32, ccc::ReduceOp::Sum);
  return count_wrong(buffers);
}

int all_reduce_c_api() {
  RankBuffers buffers = rank_inputs();
  cccComm_t comms[kRanks];
  cccResult_t result = cccCommInitAllHost(comms, kRanks);
  for (int r = 0; r < kRanks && result == cccSuccess; ++r)
    result = cccAllReduce(buffers[r].data(), buffers[r].data(), kCount, cccFloat32, cccSum, comms[r], nullptr);
  if (result != cccSuccess) {
    std::fprintf(stderr, "C API: %s\n", cccGetErrorString(result));
    return static_cast<int>(kRanks * kCount);
  }
  for (cccComm_t comm : comms) cccCommDestroy(comm);
  return count_wrong(buffers);
}

}  // namespace

int main() {
  try {
    const int wrong_cpp = all_reduce_communicator(), wrong_c = all_reduce_c_api();
    std::printf("allreduce of %zu floats over %d host ranks: ccc::Communicator %d wrong, C API %d wrong\n",
                kCount, kRanks, wrong_cpp, wrong_c);
    return wrong_cpp + wrong_c == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ccc: %s\n", e.what());
    return 1;
  }
}
