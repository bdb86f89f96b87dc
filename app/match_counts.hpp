// Per-process match statistics for app/_answers.pyx: how many deliveries each subscription
// id had since the last drain, and when the last one was (seconds since the Unix epoch).
//
// The hot path is ``add``: two stores into arrays indexed by id (ids come from a sequence,
// so they are dense; the routing table keeps its name list the same way), plus a push onto
// ``touched_`` the first time an id is counted, so a drain visits only the ids counted
// since the last one, not the whole array. Ids past the dense bound the caller gives (the
// routing table's name list) go to a hash map. Not thread-safe on its own: every call is
// made with the GIL held and none releases it, so calls never overlap.
#pragma once

#include <cstdint>
#include <ctime>
#include <unordered_map>
#include <vector>

namespace topicstore_stats {

struct Tally {
    uint32_t count;  // saturates at UINT32_MAX rather than wrapping to 0
    uint32_t last;   // seconds since the Unix epoch
};

class MatchCounts {
public:
    // One delivery of ``id`` at ``now``. Ids below ``dense`` are counted in the arrays,
    // which grow to ``dense`` the first time such an id is past their end.
    inline void add(uint32_t id, uint32_t now, size_t dense) {
        if (id >= dense_.size()) {
            if (id >= dense) {
                bump(far_[id], now);
                return;
            }
            dense_.resize(dense, Tally{0, 0});
        }
        Tally& t = dense_[id];
        if (t.count == 0) touched_.push_back(id);
        bump(t, now);
    }

    // ``count`` deliveries of ``id``, the last at ``last`` (a drained tally put back after
    // its flush failed).
    inline void restore(uint32_t id, uint32_t count, uint32_t last, size_t dense) {
        if (count == 0) return;
        Tally* t;
        if (id < dense_.size() || id < dense) {
            if (id >= dense_.size()) dense_.resize(dense, Tally{0, 0});
            t = &dense_[id];
            if (t->count == 0) touched_.push_back(id);
        } else {
            t = &far_[id];
        }
        uint64_t sum = uint64_t(t->count) + count;
        t->count = sum > UINT32_MAX ? UINT32_MAX : uint32_t(sum);
        if (last > t->last) t->last = last;
    }

    // Every counted id with its tally, then the counts start again from zero. O(ids
    // counted since the last drain); an id may appear twice (once from the map, once from
    // the arrays, when the arrays grew past it between two drains): the store adds both.
    void drain(std::vector<uint32_t>& ids, std::vector<uint32_t>& counts,
               std::vector<uint32_t>& lasts) {
        size_t n = touched_.size() + far_.size();
        ids.reserve(n);
        counts.reserve(n);
        lasts.reserve(n);
        for (uint32_t id : touched_) {
            Tally& t = dense_[id];
            ids.push_back(id);
            counts.push_back(t.count);
            lasts.push_back(t.last);
            t = Tally{0, 0};
        }
        touched_.clear();
        for (const auto& [id, t] : far_) {
            ids.push_back(id);
            counts.push_back(t.count);
            lasts.push_back(t.last);
        }
        far_.clear();
    }

    // ``add`` of each of ``ids[0..n)``, in one tight pass that asks for the counters
    // ``kAhead`` ids ahead: over a large table each id's counters are a cache miss, and
    // this overlaps them instead of waiting for each in turn.
    void add_all(const uint32_t* ids, size_t n, uint32_t now, size_t dense) {
        static constexpr size_t kAhead = 16;
        Tally* base = dense_.data();
        size_t size = dense_.size();
        for (size_t j = 0; j < n; ++j) {
            if (j + kAhead < n && ids[j + kAhead] < size)
                __builtin_prefetch(base + ids[j + kAhead], 1, 0);
            uint32_t id = ids[j];
            if (id < size) {
                Tally& t = base[id];
                if (t.count == 0) touched_.push_back(id);
                bump(t, now);
            } else {
                add(id, now, dense);  // may grow the arrays
                base = dense_.data();
                size = dense_.size();
            }
        }
    }

    size_t pending() const { return touched_.size() + far_.size(); }

    // The second now, from the kernel's coarse clock (a read of a shared page: no time
    // source is read, which costs more than a count; it lags by at most a few ms).
    static uint32_t now() {
        timespec ts;
        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        return static_cast<uint32_t>(ts.tv_sec);
    }

private:
    static inline void bump(Tally& t, uint32_t now) {
        t.count += t.count != UINT32_MAX;
        t.last = now;
    }

    std::vector<Tally> dense_;
    std::vector<uint32_t> touched_;
    std::unordered_map<uint32_t, Tally> far_;
};

}  // namespace topicstore_stats
