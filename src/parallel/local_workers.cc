#include "parallel/local_workers.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace kestrel {
namespace {

constexpr const char* kWorkerFlag = "--kestrel-tp-worker";
constexpr const char* kLocalHost = "127.0.0.1";
constexpr int kNotReaped = -1;
constexpr int kLost = -2;  // ended, but its status went elsewhere

std::string make_rendezvous_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kestrel-tp-XXXXXX";
  KS_CHECK(mkdtemp(pattern.data()) != nullptr,
           "tensor parallel: cannot make a rendezvous directory {}: {}", pattern,
           std::strerror(errno));
  return pattern;
}

// The path, for argv[0] and `ps`; the process itself runs /proc/self/exe (see spawn_rank).
std::string own_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  KS_CHECK(n > 0, "tensor parallel: cannot resolve /proc/self/exe: {}", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

pid_t spawn_rank(const std::string& exe, const std::vector<std::string>& command,
                 const std::string& dir, int rank, int world_size) {
  // The parent's environment (model paths, thread counts, test settings) minus any
  // KESTREL_TP_* it carries itself, which would contradict this rank's.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).rfind("KESTREL_TP_", 0) != 0) env.emplace_back(*e);
  }
  env.push_back("KESTREL_TP_RANK=" + std::to_string(rank));
  env.push_back("KESTREL_TP_WORLD_SIZE=" + std::to_string(world_size));
  env.push_back("KESTREL_TP_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("KESTREL_TP_RENDEZVOUS=" + dir);
  env.push_back(std::string("KESTREL_TP_HOST=") + kLocalHost);
  env.push_back("KESTREL_TP_PARENT_PID=" + std::to_string(getpid()));
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> args = command.empty() ? std::vector<std::string>{exe} : command;
  args.push_back(kWorkerFlag);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // A thread of the parent may block signals (a server's signal thread); the worker
  // starts with none blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  // /proc/self/exe rather than the resolved path: the very image rank 0 runs, even if the
  // file was rebuilt or replaced since it started.
  pid_t pid = 0;
  const int rc = command.empty()
                     ? posix_spawn(&pid, "/proc/self/exe", nullptr, &attr, argv.data(), envp.data())
                     : posix_spawnp(&pid, args[0].c_str(), nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  KS_CHECK(rc == 0, "tensor parallel: cannot start rank {} ({} {}): {}", rank, args[0], kWorkerFlag,
           std::strerror(rc));
  return pid;
}

std::string describe_end(int rank, pid_t pid, int status) {
  if (status == kLost) {
    return fmt::format("tensor-parallel rank {} (pid {}) ended (its exit status is unknown)", rank,
                       pid);
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("tensor-parallel rank {} (pid {}) was killed by signal {} ({})", rank, pid,
                       sig, strsignal(sig));
  }
  return fmt::format("tensor-parallel rank {} (pid {}) exited with status {}", rank, pid,
                     WIFEXITED(status) ? WEXITSTATUS(status) : status);
}

bool ended_cleanly(int status) {
  return status != kLost && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::optional<int> parse_int(const char* name, const char* value) {
  if (value == nullptr) return std::nullopt;
  const std::string_view s(value);
  int out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  KS_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
           "tensor parallel: {}='{}' is not an integer", name, s);
  return out;
}

int required_int(const char* name) {
  const std::optional<int> v = parse_int(name, std::getenv(name));
  KS_CHECK(v.has_value(), "tensor parallel: {} is not set", name);
  return *v;
}

RankInfo checked(RankInfo info, const char* source) {
  KS_CHECK(
      info.world_size >= 1 && info.rank >= 0 && info.rank < info.world_size && info.local_rank >= 0,
      "tensor parallel: {} gives rank {} of {} (local rank {}), which is impossible", source,
      info.rank, info.world_size, info.local_rank);
  return info;
}

}  // namespace

LocalWorkers::LocalWorkers(int world_size, std::vector<std::string> command)
    : world_size_(world_size) {
  KS_CHECK(world_size >= 1, "tensor parallel: LocalWorkers needs world_size >= 1, got {}",
           world_size);
  const std::string exe = own_executable();
  dir_ = make_rendezvous_dir();
  try {
    for (int r = 1; r < world_size; ++r) {
      pids_.push_back(spawn_rank(exe, command, dir_, r, world_size));
      exit_status_.push_back(kNotReaped);
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

LocalWorkers::~LocalWorkers() {
  if (!wait_exit(kShutdownGraceMs)) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (exit_status_[i] == kNotReaped) kill(pids_[i], SIGKILL);
    }
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (exit_status_[i] == kNotReaped) waitpid(pids_[i], &exit_status_[i], 0);
    }
  }
  std::error_code ec;  // a destructor must not throw; a leftover temp dir is harmless
  std::filesystem::remove_all(dir_, ec);
}

RankInfo LocalWorkers::rank0() const { return RankInfo{0, world_size_, 0, dir_, kLocalHost}; }

void LocalWorkers::reap() {
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (exit_status_[i] != kNotReaped) continue;
    int status = 0;
    const pid_t rc = waitpid(pids_[i], &status, WNOHANG);
    if (rc == pids_[i]) {
      exit_status_[i] = status;
    } else if (rc < 0 && errno == ECHILD) {
      exit_status_[i] = kLost;  // someone else reaped it (SIGCHLD set to SIG_IGN)
    } else {
      continue;
    }
    reap_order_.push_back(i);
  }
}

std::string LocalWorkers::worker_end(int rank) {
  KS_CHECK(rank >= 1 && rank < world_size_, "tensor parallel: no worker rank {} in a group of {}",
           rank, world_size_);
  reap();
  const size_t i = static_cast<size_t>(rank) - 1;
  return exit_status_[i] == kNotReaped ? "" : describe_end(rank, pids_[i], exit_status_[i]);
}

std::string LocalWorkers::dead_worker() {
  reap();
  // The likeliest cause first: a rank that dies takes the others' connections with it, and
  // they then exit with an error status by themselves, often before rank 0 looks.
  const auto severity = [](int status) {
    if (status != kLost && WIFSIGNALED(status)) return 2;
    return ended_cleanly(status) ? 0 : 1;
  };
  int best = -1;
  for (size_t i : reap_order_) {
    if (best < 0 || severity(exit_status_[i]) > severity(exit_status_[best])) {
      best = static_cast<int>(i);
    }
  }
  return best < 0 ? "" : describe_end(best + 1, pids_[best], exit_status_[best]);
}

bool LocalWorkers::wait_exit(int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    reap();
    bool all = true;
    for (int s : exit_status_) all = all && s != kNotReaped;
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::optional<RankInfo> spawned_worker_role(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) != kWorkerFlag) return std::nullopt;
  // posix_spawn cannot set this in the child, so the worker sets it on itself; the parent
  // may have died before this line, which the getppid() check below catches.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  RankInfo info;
  info.rank = required_int("KESTREL_TP_RANK");
  info.world_size = required_int("KESTREL_TP_WORLD_SIZE");
  info.local_rank = required_int("KESTREL_TP_LOCAL_RANK");
  const char* dir = std::getenv("KESTREL_TP_RENDEZVOUS");
  KS_CHECK(dir && *dir, "tensor parallel: {} given but KESTREL_TP_RENDEZVOUS is not set",
           kWorkerFlag);
  info.rendezvous_dir = dir;
  const char* host = std::getenv("KESTREL_TP_HOST");
  info.host = host ? host : "";
  if (const std::optional<int> parent =
          parse_int("KESTREL_TP_PARENT_PID", std::getenv("KESTREL_TP_PARENT_PID"))) {
    KS_CHECK(getppid() == *parent,
             "tensor-parallel rank {}: the process that started it (pid {}) has already exited",
             info.rank, *parent);
  }
  return checked(info, "the --kestrel-tp-worker environment");
}

std::optional<RankInfo> launched_rank_from_env(const std::string& rendezvous_dir) {
  struct Family {
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  static constexpr Family kFamilies[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"KESTREL_TP_RANK", "KESTREL_TP_WORLD_SIZE", "KESTREL_TP_LOCAL_RANK"},
  };
  for (const Family& f : kFamilies) {
    if (std::getenv(f.rank) == nullptr) continue;
    RankInfo info;
    info.rank = required_int(f.rank);
    info.world_size = required_int(f.size);
    info.local_rank = required_int(f.local_rank);
    info.rendezvous_dir = rendezvous_dir;
    const char* host = std::getenv("KESTREL_TP_HOST");
    info.host = host ? host : "";
    return checked(info, f.rank);
  }
  return std::nullopt;
}

}  // namespace kestrel
