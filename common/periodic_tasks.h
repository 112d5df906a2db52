// One thread that runs the server's periodic background work: named tasks, each run every
// `interval` (fixed delay: the next run is due `interval` after the previous one ended), one at a
// time, in due order. The server owns one PeriodicTasks and hands it to each component that polls
// (token file, TLS certificate files, store maintenance, metrics refresh); a component adds its
// task and keeps the returned Handle, whose destruction removes the task and waits for a run in
// progress, so a task never outlives the object it touches.
//
// A task returns absl::Status. A failure (or an exception it throws) is counted and logged at
// warn with the task's name when the task was fine before or its message changed, and once at
// info when it recovers: a task that keeps failing the same way logs one line, not one per run.
// The task stays scheduled either way.
//
// Not for deadlines or latency-critical work: a task waits behind any other that is running (a
// store maintenance pass may take seconds), so a task is delayed by up to the longest other task.
// The per-call timers (CallWatchdog) and the byte budget's grant delivery have their own threads
// for that reason (docs/architecture.md, "Background threads").
//
// Tests: ManualForTest() makes a service without a thread, on an injected clock;
// RunDueForTest() runs what is due at that clock's now(), on the caller's thread.
//
// Thread safety: all methods are thread-safe. A task may use its own Handle (Trigger,
// SetInterval, Cancel) from inside its run; it must not destroy the PeriodicTasks.
#ifndef TURBOKV_COMMON_PERIODIC_TASKS_H_
#define TURBOKV_COMMON_PERIODIC_TASKS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace turbokv {

class PeriodicTasks {
 public:
  using Clock = std::chrono::steady_clock;
  using Task = std::function<absl::Status()>;
  using NowFn = std::function<Clock::time_point()>;

  // A task's place in the service. Destroying (or Cancel()ing) it removes the task; when the
  // task is running on another thread, waits for that run to end. Movable; an empty Handle
  // (default-constructed, or added after Shutdown) does nothing. Must not outlive the service.
  class Handle {
   public:
    Handle() = default;
    ~Handle() { Cancel(); }
    Handle(Handle&& other) noexcept;
    Handle& operator=(Handle&& other) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;

    // Runs the task as soon as the service's thread is free (then again `interval` after).
    void Trigger() const;
    // The next run is due `interval` (> 0) from now, and each later one `interval` after the
    // previous run ended.
    void SetInterval(Clock::duration interval) const;
    // Removes the task (idempotent). Returns once no run of it is in progress, unless called
    // from within the task's own run.
    void Cancel();
    bool active() const { return service_ != nullptr; }

   private:
    friend class PeriodicTasks;
    Handle(PeriodicTasks* service, uint64_t id) : service_(service), id_(id) {}
    PeriodicTasks* service_ = nullptr;
    uint64_t id_ = 0;
  };

  // What a task has done, for logs and tests.
  struct TaskStatus {
    std::string name;
    Clock::duration interval{};
    uint64_t runs = 0;
    uint64_t failures = 0;
    absl::Status last;  // of the latest run; OK before the first
  };

  // Starts the thread (named `thread_name` in ps/top, at most 15 characters used).
  explicit PeriodicTasks(std::string thread_name = "tkv-periodic");
  // No thread: tasks run only in RunDueForTest(), and time is `now`.
  [[nodiscard]] static std::unique_ptr<PeriodicTasks> ManualForTest(NowFn now);
  ~PeriodicTasks();  // Shutdown()
  PeriodicTasks(const PeriodicTasks&) = delete;
  PeriodicTasks& operator=(const PeriodicTasks&) = delete;

  // Adds a task, first due `interval` (> 0) from now. After Shutdown: an empty Handle.
  [[nodiscard]] Handle Add(std::string name, Clock::duration interval, Task task);

  // Stops the thread after the run in progress (if any) and joins it; no task runs after it
  // returns. Idempotent; Handles stay valid (their calls do nothing).
  void Shutdown();

  // The tasks in the order they were added.
  std::vector<TaskStatus> Snapshot() const;

  // ManualForTest only: runs, on this thread, each task due at now(), earliest first, each at
  // most once per call (a task made due by a run runs in the same call unless it ran already).
  // Returns the number of runs.
  size_t RunDueForTest();

 private:
  struct Entry {
    std::string name;
    Clock::duration interval{};
    Clock::time_point next;
    std::shared_ptr<Task> task;
    bool triggered = false;  // Trigger() during a run: due again right after it
    uint64_t runs = 0;
    uint64_t failures = 0;
    absl::Status last;
  };

  PeriodicTasks(NowFn now, bool start_thread, std::string thread_name);
  void Loop();
  // The due entry with the earliest `next`, or tasks_.end(). Requires mu_.
  std::map<uint64_t, Entry>::iterator EarliestLocked();
  // Runs entry `id` without mu_ (held on entry and on return) and reschedules it.
  void RunLocked(std::unique_lock<std::mutex>& l, uint64_t id);
  void Remove(uint64_t id);
  void Trigger(uint64_t id);
  void SetInterval(uint64_t id, Clock::duration interval);

  const NowFn now_;
  mutable std::mutex mu_;
  std::condition_variable wake_cv_;  // the loop: a task added, triggered or rescheduled; stop
  std::condition_variable idle_cv_;  // Remove: a run ended
  std::map<uint64_t, Entry> tasks_;  // by id = order added
  uint64_t next_id_ = 0;
  uint64_t running_ = 0;  // the id of the task running now; 0: none
  std::thread::id running_thread_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace turbokv

#endif  // TURBOKV_COMMON_PERIODIC_TASKS_H_
