// Connection floods on loopback for the resource-exhaustion tests of the gRPC servers (issue 16
// row 2): raw TCP connections that never speak HTTP/2, the descriptor cap that makes a server's
// accept4 fail with EMFILE, and waiting (bounded) until the server closed what it was sent.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sift::testing {

// Up to `n` TCP connections to 127.0.0.1:port; stops at the first socket() or connect() that
// fails (a descriptor cap). The caller closes them (CloseAll).
inline std::vector<int> OpenRawConnections(int port, int n) {
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    fds.push_back(fd);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) break;
  }
  return fds;
}

inline void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

// How many of `fds` the peer closed (EOF or reset) by `deadline`: polls until all are or the
// deadline passes. Bytes the server sent before closing (a GOAWAY) are read and dropped.
inline size_t WaitUntilClosedByPeer(const std::vector<int>& fds, absl::Time deadline) {
  std::vector<bool> closed(fds.size(), false);
  size_t n_closed = 0;
  while (n_closed < fds.size() && absl::Now() < deadline) {
    std::vector<pollfd> pfds;
    std::vector<size_t> index;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (closed[i]) continue;
      pfds.push_back({fds[i], POLLIN, 0});
      index.push_back(i);
    }
    if (poll(pfds.data(), pfds.size(), 100) <= 0) continue;
    for (size_t j = 0; j < pfds.size(); ++j) {
      if (pfds[j].revents == 0) continue;
      char buf[4096];
      const ssize_t got = recv(pfds[j].fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (got <= 0 || (pfds[j].revents & (POLLHUP | POLLERR)) != 0) {
        closed[index[j]] = true;
        ++n_closed;
      }
    }
  }
  return n_closed;
}

// Caps this process's descriptors at what it holds now plus `headroom` while alive; restores the
// limit on destruction (or Restore()).
class DescriptorCap {
 public:
  explicit DescriptorCap(int headroom) {
    ok_ = getrlimit(RLIMIT_NOFILE, &saved_) == 0;
    int open_now = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)e;
      ++open_now;
    }
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(open_now + headroom);
    ok_ = ok_ && setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~DescriptorCap() { Restore(); }
  DescriptorCap(const DescriptorCap&) = delete;
  DescriptorCap& operator=(const DescriptorCap&) = delete;

  bool ok() const { return ok_; }
  bool Restore() {
    if (restored_) return true;
    restored_ = true;
    return setrlimit(RLIMIT_NOFILE, &saved_) == 0;
  }

 private:
  rlimit saved_{};
  bool ok_ = false;
  bool restored_ = false;
};

// Runs a descriptor-exhaustion flood against 127.0.0.1:port of a server in this process: caps
// the process 256 descriptors above what it holds, connects until the cap (the server's accepts
// then fail with EMFILE), lets the server try to accept them for 2 s, closes them and lifts the
// cap. Returns how many connections the flood held (> 100 when the cap was reached).
inline size_t ExhaustDescriptors(int port) {
  DescriptorCap cap(256);
  if (!cap.ok()) return 0;
  std::vector<int> flood = OpenRawConnections(port, 4096);
  absl::SleepFor(absl::Seconds(2));  // the server tries to accept them meanwhile
  const size_t held = flood.size();
  CloseAll(&flood);
  return cap.Restore() ? held : 0;
}

}  // namespace sift::testing
