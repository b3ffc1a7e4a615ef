#include "common/broken_pipe.h"

#include <signal.h>

namespace sift {

void IgnoreBrokenPipes() {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace sift
