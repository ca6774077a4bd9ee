// Tests whose ranks are processes of the test binary itself: each rank process runs one test
// (`--gtest_filter`) with an environment of its own, and reports through its exit status.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ccc::test {

// Starts `n` copies of this binary running `test`, rank r with `env_of(r)` ahead of this process's
// environment, waits at most `limit` for all of them (then kills the rest), and expects each to
// exit 0 without skipping; a failure names `what` and shows the rank's output.
inline void run_rank_processes(int n, const std::string& test, const std::function<std::vector<std::string>(int)>& env_of,
                               std::chrono::seconds limit, const std::string& what) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = env_of(r);
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);  // earlier entries win
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string filter = "--gtest_filter=" + test;
    std::vector<char*> argv{const_cast<char*>(self.c_str()), filter.data(), nullptr};
    logs.push_back(testing::TempDir() + "/ccc_rank" + std::to_string(r) + "_" + std::to_string(::getpid()) + ".log");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(rc, 0) << "posix_spawn: " << std::strerror(rc);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
        ::waitpid(pids[r], &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(logs[r]);
    const std::string log((std::istreambuf_iterator<char>(in)), {});
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << what << ": rank " << r << " (status " << status << "):\n" << log;
    EXPECT_EQ(log.find("[  SKIPPED ]"), std::string::npos) << what << ": rank " << r << " skipped:\n" << log;
    std::remove(logs[r].c_str());
  }
}

}  // namespace ccc::test
