// The bench suites that run an MPI program read its CSV lines through run_reporting(): rows, other
// lines, the exit status, and a malformed line refused without leaving the program unwaited.
#include "common.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using hdsm::tool::CommandResult;
using hdsm::tool::run_reporting;

// No child left: neither running nor a zombie.
bool no_children() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

TEST(RunReporting, RowsOtherLinesAndTheStatus) {
  std::vector<std::vector<std::string>> rows;
  std::string device;
  const CommandResult r = run_reporting(
      "printf 'hello\\ncsv,a,1\\ndevice,sim0\\ncsv,b,2\\n'; exit 3", "test", 2,
      [&](const std::vector<std::string>& f) { rows.push_back(f); },
      [&](const std::string& line) {
        if (line.rfind("device,", 0) != 0) return false;
        device = line.substr(7);
        return true;
      });
  EXPECT_EQ(rows, (std::vector<std::vector<std::string>>{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(device, "sim0");
  EXPECT_EQ(r.other_lines, "hello\n");
  EXPECT_EQ(hdsm::tool::wait_status_text(r.status), "exit code 3");
  EXPECT_TRUE(no_children());
}

TEST(RunReporting, AMalformedLineNamesItselfAndTheProgramIsWaitedFor) {
  // A wrong field count, and a number that does not parse (std::stoull's invalid_argument).
  for (const char* command :
       {"printf 'csv,1,2,3\\n'; sleep 0.2; printf 'csv,4,5\\n'", "printf 'csv,x,y\\n'"}) {
    try {
      (void)run_reporting(command, "test suite", 2,
                          [](const std::vector<std::string>& f) { (void)std::stoull(f[0]); });
      ADD_FAILURE() << command << " was accepted";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("test suite: malformed line"), std::string::npos) << what;
      EXPECT_NE(what.find("csv,"), std::string::npos) << what;
    }
    EXPECT_TRUE(no_children()) << command << ": the program was left unwaited";
  }
}

}  // namespace
