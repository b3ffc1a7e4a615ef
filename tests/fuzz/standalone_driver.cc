// A main() for the fuzz targets where libFuzzer is not linked (GCC, the normal build): runs every
// file given (directories: every file inside, sorted by name) through LLVMFuzzerTestOneInput,
// then a fixed number of random mutations of them — bit flips, byte sets, inserts, deletes,
// duplicated ranges, splices of two files, part separators — from a fixed seed, so a run is the
// same every time. No coverage feedback: this is the smoke test of `make test` (ctest
// fuzz_smoke_<name>: the seed corpus, the regression reproducers, 2000 mutations), not a fuzzer;
// `make fuzz` runs the libFuzzer builds.
//
//   fuzz_<name> [FILE|DIR]... [--iterations N] [--seconds S] [--seed N] [--max-len N]
//               [--crash-file PATH] [--write-seeds DIR]
//
// --seconds bounds the mutation phase by time as well (for manual runs; the tests use
// --iterations only). On a crash (abort, signal) the input is written to --crash-file
// (default ./fuzz-crash-<target>.bin) before the process dies. --write-seeds DIR writes the
// target's generated seed inputs (SiftFuzzWriteSeeds, for targets whose seeds are serialized
// protos or files made by sift's writers) and exits.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) void SiftFuzzWriteSeeds(const char* out_dir);

namespace {

constexpr std::string_view kSeparator = "\n~~sift-fuzz-part~~\n";  // fuzz_util.h kPartSeparator

// The input being run, for the crash handler.
const std::string* g_current = nullptr;
char g_crash_file[4096] = "fuzz-crash.bin";

void OnCrash(int sig) {
  if (g_current != nullptr) {
    const int fd = ::open(g_crash_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t unused = ::write(fd, g_current->data(), g_current->size());
      (void)unused;
      ::close(fd);
    }
    static const char kMsg[] = "standalone fuzz driver: crashing input written to ";
    ssize_t unused = ::write(2, kMsg, sizeof(kMsg) - 1);
    unused = ::write(2, g_crash_file, std::strlen(g_crash_file));
    unused = ::write(2, "\n", 1);
    (void)unused;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

// splitmix64: a fixed generator, the same on every platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }

 private:
  uint64_t s_;
};

void Mutate(std::string* s, const std::vector<std::string>& corpus, size_t max_len, Rng* rng) {
  static const uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, '\n', '"', '\'', '{', '[', ':'};
  const size_t n = 1 + rng->Below(4);
  for (size_t k = 0; k < n; ++k) {
    switch (rng->Below(8)) {
      case 0:  // flip a bit
        if (!s->empty()) (*s)[rng->Below(s->size())] ^= static_cast<char>(1u << rng->Below(8));
        break;
      case 1:  // set a byte to a random or an interesting value
        if (!s->empty()) {
          (*s)[rng->Below(s->size())] = static_cast<char>(
              rng->Below(2) ? rng->Below(256) : kInteresting[rng->Below(sizeof(kInteresting))]);
        }
        break;
      case 2: {  // insert random bytes
        std::string bytes(1 + rng->Below(8), '\0');
        for (char& c : bytes) c = static_cast<char>(rng->Below(256));
        s->insert(rng->Below(s->size() + 1), bytes);
        break;
      }
      case 3:  // delete a range
        if (!s->empty()) {
          const size_t at = rng->Below(s->size());
          s->erase(at, 1 + rng->Below(std::min<size_t>(s->size() - at, 64)));
        }
        break;
      case 4:  // duplicate a range
        if (!s->empty()) {
          const size_t at = rng->Below(s->size());
          const std::string piece = s->substr(at, 1 + rng->Below(64));
          s->insert(rng->Below(s->size() + 1), piece);
        }
        break;
      case 5: {  // splice: a prefix of this one, a suffix of another corpus file
        const std::string& other = corpus[rng->Below(corpus.size())];
        const size_t keep = rng->Below(s->size() + 1);
        const size_t from = rng->Below(other.size() + 1);
        s->resize(keep);
        s->append(other, from, std::string::npos);
        break;
      }
      case 6:  // a part separator (multi-part targets)
        s->insert(rng->Below(s->size() + 1), kSeparator);
        break;
      case 7:  // truncate
        s->resize(rng->Below(s->size() + 1));
        break;
    }
  }
  if (s->size() > max_len) s->resize(max_len);
}

bool ReadFile(const std::filesystem::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [FILE|DIR]... [--iterations N] [--seconds S] [--seed N] [--max-len N] "
               "[--crash-file PATH] [--write-seeds DIR]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  uint64_t iterations = 0, seed = 1;
  double seconds = 0;
  size_t max_len = 0;
  std::string write_seeds;
  const std::string target = std::filesystem::path(argv[0]).filename().string();
  std::snprintf(g_crash_file, sizeof(g_crash_file), "fuzz-crash-%s.bin", target.c_str());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--iterations" && (v = value())) {
      iterations = std::strtoull(v, nullptr, 10);
    } else if (a == "--seconds" && (v = value())) {
      seconds = std::strtod(v, nullptr);
    } else if (a == "--seed" && (v = value())) {
      seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--max-len" && (v = value())) {
      max_len = std::strtoull(v, nullptr, 10);
    } else if (a == "--crash-file" && (v = value())) {
      std::snprintf(g_crash_file, sizeof(g_crash_file), "%s", v);
    } else if (a == "--write-seeds" && (v = value())) {
      write_seeds = v;
    } else if (a.rfind("--", 0) == 0) {
      return Usage(argv[0]);
    } else {
      paths.push_back(a);
    }
  }
  if (!write_seeds.empty()) {
    if (SiftFuzzWriteSeeds == nullptr) {
      std::fprintf(stderr, "%s: this target has no generated seeds\n", target.c_str());
      return 1;
    }
    std::filesystem::create_directories(write_seeds);
    SiftFuzzWriteSeeds(write_seeds.c_str());
    return 0;
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, OnCrash);

  std::vector<std::filesystem::path> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::filesystem::path> in_dir;
      for (const auto& e : std::filesystem::recursive_directory_iterator(p, ec)) {
        if (e.is_regular_file()) in_dir.push_back(e.path());
      }
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (std::filesystem::exists(p, ec)) {
      files.emplace_back(p);
    } else {
      std::fprintf(stderr, "%s: %s: no such file or directory\n", target.c_str(), p.c_str());
      return 1;
    }
  }
  std::vector<std::string> corpus;
  size_t largest = 0;
  for (const auto& f : files) {
    std::string bytes;
    if (!ReadFile(f, &bytes)) {
      std::fprintf(stderr, "%s: %s: cannot read\n", target.c_str(), f.c_str());
      return 1;
    }
    Run(bytes);
    largest = std::max(largest, bytes.size());
    corpus.push_back(std::move(bytes));
  }
  if (corpus.empty()) corpus.emplace_back();
  if (max_len == 0) max_len = std::max<size_t>(4096, 2 * largest);

  if (seconds > 0 && iterations == 0) iterations = UINT64_MAX;  // bounded by time only
  const auto start = std::chrono::steady_clock::now();
  Rng rng(seed);
  uint64_t done = 0;
  for (; done < iterations; ++done) {
    if (seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >=
            seconds) {
      break;
    }
    std::string input = corpus[rng.Below(corpus.size())];
    Mutate(&input, corpus, max_len, &rng);
    Run(input);
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu files, %llu mutations (seed %llu) in %.2f s: no crash\n", target.c_str(),
              files.size(), static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(seed), took);
  return 0;
}
