// common/log_window.h: the burst per window, and the count of held-back lines handed to the first
// line of the next window.
#include "common/log_window.h"

#include <thread>

#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(LogWindow, AdmitsTheBurstThenHoldsBack) {
  LogWindow w(2, std::chrono::hours(1));
  int64_t held = -1;
  EXPECT_TRUE(w.Admit(&held));
  EXPECT_EQ(held, 0);  // the first window starts with nothing held back
  held = -1;
  EXPECT_TRUE(w.Admit(&held));
  EXPECT_EQ(held, -1);  // same window: left alone
  EXPECT_FALSE(w.Admit(&held));
  EXPECT_FALSE(w.Admit(&held));
  EXPECT_EQ(held, -1);
}

TEST(LogWindow, ANewWindowReportsWhatTheLastHeldBack) {
  LogWindow w(1, std::chrono::milliseconds(300));
  int64_t held = -1;
  EXPECT_TRUE(w.Admit(&held));
  EXPECT_FALSE(w.Admit(&held));
  EXPECT_FALSE(w.Admit(&held));
  EXPECT_EQ(held, 0);                                           // not handed over inside the window
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // well past the window's end
  EXPECT_TRUE(w.Admit(&held));
  EXPECT_EQ(held, 2);
  held = -1;
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_TRUE(w.Admit(&held));
  EXPECT_EQ(held, 0);  // the window before held nothing back
}

}  // namespace
}  // namespace sift
