#include "util/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "util/error.hpp"

namespace leap::util {

namespace {
using Clock = std::chrono::steady_clock;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty()) throw Error("run_process: empty argv");
  ProcessResult result;
  int out_pipe[2];
  int err_pipe[2];  // reports an exec failure: closed by a successful exec (CLOEXEC)
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
    throw Error(std::string("run_process: pipe: ") + std::strerror(errno));

  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  const auto start = Clock::now();
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("run_process: fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(out_pipe[1], 2);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) {
      int e = errno;
      (void)!write(err_pipe[1], &e, sizeof e);
      _exit(127);
    }
    execvp(cargv[0], cargv.data());
    int e = errno;
    (void)!write(err_pipe[1], &e, sizeof e);
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so a kill right away reaches the group
  close(out_pipe[1]);
  close(err_pipe[1]);

  char buf[65536];
  bool killed = false;
  for (;;) {
    int wait_ms = -1;
    if (options.timeout_s > 0 && !killed) {
      double left = options.timeout_s -
                    std::chrono::duration<double>(Clock::now() - start).count();
      if (left <= 0) {
        kill(-pid, SIGKILL);
        killed = true;
        result.timed_out = true;
        wait_ms = 1000;  // drain what is left; a grandchild holding the pipe is killed too
      } else {
        wait_ms = static_cast<int>(left * 1000) + 1;
      }
    } else if (killed) {
      wait_ms = 1000;
    }
    pollfd pfd{out_pipe[0], POLLIN, 0};
    int r = poll(&pfd, 1, wait_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (r == 0) {
      if (killed) break;  // nothing more after the kill
      continue;           // loop re-checks the deadline
    }
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;
    size_t keep = std::min(static_cast<size_t>(n),
                           options.max_output_bytes - std::min(options.max_output_bytes, result.output.size()));
    result.output.append(buf, keep);
    if (keep < static_cast<size_t>(n)) result.truncated = true;
  }
  close(out_pipe[0]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int exec_errno = 0;
  if (read(err_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
    result.exec_failed = true;
    result.output += std::string("cannot run ") + argv[0] + ": " + std::strerror(exec_errno);
  }
  close(err_pipe[0]);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

int run_foreground(const std::vector<std::string>& argv) {
  if (argv.empty()) return 127;
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("run_foreground: fork: ") + std::strerror(errno));
  if (pid == 0) {
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace leap::util
