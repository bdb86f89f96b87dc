// Per-process match statistics for app/_answers.pyx: how many deliveries each subscription
// id had since the last drain, and when the last one was.
//
// The hot path is ``add_all``: one 4-byte word per id in an array indexed by id (ids come
// from a sequence, so they are dense; the routing table keeps its name list the same way),
// holding the count (low 24 bits) and the second of the last delivery as an offset from
// the last drain (high 8 bits). One word, not two, because over a large table each id's
// counter is a cache miss, and a smaller array misses less. The first count of an id since
// a drain also pushes it onto ``touched_``, so a drain visits only those ids. What does not
// fit a word goes to a map of full tallies: ids past the dense bound the caller gives, a
// count reaching 2**24 - 1 (moved there whole), an offset past 255 s (kept at 255), and
// counts put back after a failed flush. Not thread-safe on its own: every call is made with
// the GIL held and none releases it, so calls never overlap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <unordered_map>
#include <vector>

namespace topicstore_stats {

struct Tally {
    uint32_t count;  // saturates at UINT32_MAX rather than wrapping
    uint32_t last;   // seconds since the Unix epoch
};

class MatchCounts {
public:
    static constexpr uint32_t kCountMax = (1u << 24) - 1;
    static constexpr uint32_t kMaxOffset = 255;
    // How far ahead ``add_all`` asks for counters: over a large table of scattered ids a
    // miss outlasts the work of 16 ids, so 16 left part of each miss exposed; 32 hides
    // it, and the lines asked for are still cached when their ids come.
    static constexpr size_t kAhead = 32;

    MatchCounts() : base_(now()) {}

    // The second now, from the kernel's coarse clock (a read of a shared page: no time
    // source is read, which costs more than a count; it lags by at most a few ms).
    static uint32_t now() {
        timespec ts;
        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        return static_cast<uint32_t>(ts.tv_sec);
    }

    // One delivery of each of ``ids[0..n)`` at second ``second``, in one tight pass that
    // asks for the counters ``kAhead`` ids ahead (over a large table each is a cache miss;
    // this overlaps them). Ids below ``dense`` are counted in the array, grown to ``dense``
    // first if it is shorter. The pass is split so that its main loop prefetches with no
    // test per id (the id ``kAhead`` on exists there): such a test took a large share of
    // the pass's time.
    void add_all(const uint32_t* ids, size_t n, uint32_t second, size_t dense) {
        start(second, dense);
        size_t j = 0;
        for (; j + kAhead < n; ++j) {
            prefetch(ids[j + kAhead]);
            add(ids[j]);
        }
        for (; j < n; ++j) add(ids[j]);
    }

    // ``count`` deliveries of ``id``, the last at ``last`` (a drained tally put back after
    // its flush failed).
    void restore(uint32_t id, uint32_t count, uint32_t last) {
        if (count) bump(far_[id], count, last);
    }

    // Every counted id with its tally, then the counts start again from zero. O(ids
    // counted since the last drain); an id may appear twice (the array and the map): the
    // store adds both.
    void drain(std::vector<uint32_t>& ids, std::vector<uint32_t>& counts,
               std::vector<uint32_t>& lasts) {
        size_t n = touched_.size() + far_.size();
        ids.reserve(n);
        counts.reserve(n);
        lasts.reserve(n);
        for (uint32_t id : touched_) {
            uint32_t& word = dense_[id];
            if (word & kCountMax) {
                ids.push_back(id);
                counts.push_back(word & kCountMax);
                lasts.push_back(base_ + (word >> 24));
            }
            word = 0;
        }
        touched_.clear();
        for (const auto& [id, t] : far_) {
            ids.push_back(id);
            counts.push_back(t.count);
            lasts.push_back(t.last);
        }
        far_.clear();
        base_ = now();
    }

    size_t pending() const { return touched_.size() + far_.size(); }

private:
    // ``add_all``'s set-up, then its steps: ``add`` counts one id with what ``start`` read
    // (valid until the array next grows, in the next ``start``).
    void start(uint32_t second, size_t dense) {
        if (dense_.size() < dense) dense_.resize(dense, 0);
        words_ = dense_.data();
        size_ = dense_.size();
        stamp_ = offset(second) << 24;
        second_ = second;
    }

    // No bounds check: a prefetch never faults, and an id past the array only asks for a
    // line nobody reads.
    void prefetch(uint32_t id) const {
        __builtin_prefetch(reinterpret_cast<const void*>(
                               reinterpret_cast<uintptr_t>(words_) + uintptr_t(id) * 4),
                           1, 0);
    }

    void add(uint32_t id) {
        if (id >= size_) {
            bump(far_[id], 1, second_);
            return;
        }
        uint32_t& word = words_[id];
        if (word == 0) touched_.push_back(id);
        uint32_t count = (word & kCountMax) + 1;
        if (count == kCountMax) {  // full: move it to the map whole
            bump(far_[id], count, second_);
            count = 0;
        }
        word = stamp_ | count;
    }

    // ``second`` as an offset from the last drain, within 0..kMaxOffset.
    uint32_t offset(uint32_t second) const {
        if (second <= base_) return 0;
        return std::min(second - base_, kMaxOffset);
    }

    static void bump(Tally& t, uint32_t count, uint32_t last) {
        uint64_t sum = uint64_t(t.count) + count;
        t.count = sum > UINT32_MAX ? UINT32_MAX : uint32_t(sum);
        t.last = std::max(t.last, last);
    }

    uint32_t base_;  // the second of the last drain: the words' offsets count from it
    // What ``start`` read for ``add``.
    uint32_t* words_ = nullptr;
    size_t size_ = 0;
    uint32_t stamp_ = 0;
    uint32_t second_ = 0;
    std::vector<uint32_t> dense_;
    std::vector<uint32_t> touched_;
    std::unordered_map<uint32_t, Tally> far_;
};

}  // namespace topicstore_stats
