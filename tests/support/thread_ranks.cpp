#include "tests/support/thread_ranks.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tidal/base/error.h"

namespace tidal::testing {
namespace {

// The mailboxes every rank's communicators share: (channel, from, to) in world ranks -> messages in order.
struct Mailboxes {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<std::string, int, int>, std::deque<std::string>> mail;
  bool failed = false;  // some rank threw: waits fail instead of hanging
};

class ThreadCommunicator final : public dist::Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Mailboxes> boxes, std::string channel, std::vector<int> members, int rank)
      : boxes_(std::move(boxes)), channel_(std::move(channel)), members_(std::move(members)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }
  const char* backend() const override { return "threads"; }
  std::unique_ptr<Communicator> duplicate() override {
    auto d =
        std::make_unique<ThreadCommunicator>(boxes_, channel_ + "/d" + std::to_string(children_++), members_, rank_);
    d->share_stats_of(*this);
    return d;
  }
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& members) override {
    const int rank = dist::check_subgroup(members, rank_, size());
    std::vector<int> world;
    for (int m : members) world.push_back(members_[size_t(m)]);
    // Every rank of a group names it alike: the parent's count of children and the group's first rank.
    auto d = std::make_unique<ThreadCommunicator>(
        boxes_, channel_ + "/s" + std::to_string(children_++) + "@" + std::to_string(members.front()), world, rank);
    d->share_stats_of(*this);
    return d;
  }

  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override {
    int64_t sent = 0, received = 0;
    for (const Transfer& t : sends) {
      post(t.peer, t.data, t.bytes);
      sent += t.bytes;
    }
    for (const Transfer& t : receives) {
      take(t.peer, t.data, t.bytes);
      received += t.bytes;
    }
    record(sent, received, 0);
  }
  void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) override {
    blocks(send, true, recv, bytes_per_rank);
  }
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override {
    blocks(send, false, recv, bytes_per_rank);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    std::vector<Transfer> sends, receives;
    if (rank_ == root) {
      for (int r = 0; r < size(); ++r)
        if (r != root) sends.push_back({r, data, bytes});
    } else {
      receives.push_back({root, data, bytes});
    }
    exchange(sends, receives);
  }
  void barrier() override { all_gather(nullptr, nullptr, 0); }
  [[noreturn]] void abort(int exit_code) override {
    detail::throw_error(detail::str_cat("[threads] rank ", rank_, " aborted the run with exit code ", exit_code));
  }

 private:
  // all_to_all (`split`: block r of send goes to rank r) or all_gather (all of send to every rank).
  void blocks(const void* send, bool split, void* recv, int64_t n) {
    const auto* s = static_cast<const char*>(send);
    auto* r = static_cast<char*>(recv);
    std::vector<Transfer> sends, receives;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank_) continue;
      sends.push_back({peer, const_cast<char*>(split ? s + peer * n : s), n});
      receives.push_back({peer, r + peer * n, n});
    }
    if (n > 0) std::memmove(r + rank_ * n, split ? s + rank_ * n : s, size_t(n));
    exchange(sends, receives);
  }
  std::tuple<std::string, int, int> box(int from, int to) const {
    TIDAL_ASSERT(from >= 0 && from < size() && to >= 0 && to < size() && from != to, "[threads] a transfer from ", from,
                 " to ", to, " among ", size(), " ranks");
    return {channel_, members_[size_t(from)], members_[size_t(to)]};
  }
  void post(int peer, const void* data, int64_t bytes) {
    std::string message(static_cast<const char*>(data), static_cast<const char*>(data) + (bytes > 0 ? bytes : 0));
    std::lock_guard lock(boxes_->mutex);
    boxes_->mail[box(rank_, peer)].push_back(std::move(message));
    boxes_->changed.notify_all();
  }
  void take(int peer, void* data, int64_t bytes) {
    std::unique_lock lock(boxes_->mutex);
    std::deque<std::string>& q = boxes_->mail[box(peer, rank_)];
    boxes_->changed.wait(lock, [&] { return !q.empty() || boxes_->failed; });
    TIDAL_CHECK(!q.empty(), "[threads] rank ", rank_, " waited for rank ", peer, ", but another rank failed");
    TIDAL_CHECK(int64_t(q.front().size()) == bytes, "[threads] rank ", rank_, " expected ", bytes, " bytes from rank ",
                peer, ", its next message has ", q.front().size());
    if (bytes > 0) std::memcpy(data, q.front().data(), size_t(bytes));
    q.pop_front();
  }

  std::shared_ptr<Mailboxes> boxes_;
  std::string channel_;
  std::vector<int> members_;  // world ranks, by rank in this communicator
  int rank_;
  int children_ = 0;  // duplicates and subgroups made so far (alike on every rank)
};

}  // namespace

void run_on_thread_ranks(int ranks, const std::function<void(dist::Communicator& comm)>& body) {
  TIDAL_CHECK(ranks >= 1, "[threads] ", ranks, " ranks");
  auto boxes = std::make_shared<Mailboxes>();
  std::vector<int> world(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) world[size_t(r)] = r;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  int first = -1;  // the rank that failed first (the others' waits failed because of it)
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(boxes, "world", world, r);
        body(comm);
      } catch (...) {
        std::lock_guard lock(boxes->mutex);
        errors[size_t(r)] = std::current_exception();
        if (!boxes->failed) first = r;
        boxes->failed = true;
        boxes->changed.notify_all();
      }
    });
  for (std::thread& t : threads) t.join();
  if (first >= 0) std::rethrow_exception(errors[size_t(first)]);
}

}  // namespace tidal::testing
