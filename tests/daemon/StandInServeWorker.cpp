// A stand-in for `flowc-worker serve` that answers every task without
// running it, for the local pool's tests: a real worker retires only after
// a fault on a GPU, which these machines lack. Answers task_done, or with
// FLOWC_STAND_IN_FAULT set, the error a worker whose GPU faulted sends,
// with retire, and ends as that worker does.
#include "flowc/worker/WorkerProtocol.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <unistd.h>

int main(int argc, char **argv) {
  using namespace flowc;
  if (argc < 2 || std::strcmp(argv[1], "serve") != 0) {
    std::cerr << "stand-in worker: serve only\n";
    return 2;
  }
  bool fault = std::getenv("FLOWC_STAND_IN_FAULT") != nullptr;
  while (true) {
    flowc::v1::WorkerTask task;
    auto read = worker::readFrame(STDIN_FILENO, task);
    if (!read || !*read)
      return 0;
    flowc::v1::WorkerReply reply;
    if (fault) {
      reply = worker::errorReply(
          Status(StatusCode::Unavailable,
                 "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS; CUDA needs the "
                 "process restarted before it runs again"));
      reply.set_retire(true);
    } else {
      reply.mutable_task_done();
    }
    if (!worker::writeFrame(worker::kWorkerReplyFd, reply).isOk())
      return 1;
    if (fault)
      return 0;
  }
}
