// One open-addressing hash table for every table of the core that probes (edges, words,
// ids, tuples): linear probing from a slot's home, a power-of-two number of slots, and
// backward-shift deletion, so that there are no tombstones and a probe ends at the first
// free slot whatever was erased before. The slots are the records themselves (no pointer
// per entry): a probe reads one slot, usually in one cache line.
//
// `Keys` says what the table holds:
//   static bool free(const Slot&)           whether a slot is free
//   static Slot free_slot()                 a free slot
//   static size_t hash(const Slot&, int)    the slot's hash (masked to find its home), given
//                                           shift(): a hash that takes the top bits of a
//                                           product shifts it right by that
//   MAX_FULL / OF                           the most the table is filled: MAX_FULL / OF of
//                                           its slots (it grows past that)
// Lookups by key are the caller's (it knows how to hash a key and match a slot): probe()
// and find() take the home and a predicate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace topicstore {

template <class Slot, class Keys>
class OpenTable {
   public:
    explicit OpenTable(size_t slots = 16) { reset(slots); }

    size_t count() const { return count_; }          // occupied slots
    size_t slots() const { return slots_.size(); }   // all slots (0 after reset(0))
    size_t mask() const { return slots_.size() - 1; }
    int shift() const { return shift_; }             // 64 - log2(slots())
    const Slot* data() const { return slots_.data(); }
    const Slot& operator[](size_t i) const { return slots_[i]; }
    Slot& operator[](size_t i) { return slots_[i]; }
    typename std::vector<Slot>::const_iterator begin() const { return slots_.begin(); }
    typename std::vector<Slot>::const_iterator end() const { return slots_.end(); }

    // The first slot from `home` (masked) that is free or for which `is` holds. On slots
    // and a mask the caller read once: a walk's loops write to vectors, so the compiler
    // cannot keep the table's pointer and size in registers across them by itself.
    template <class Is>
    static size_t probe(const Slot* slots, size_t mask, size_t home, Is&& is) {
        for (size_t i = home & mask;; i = (i + 1) & mask)
            if (Keys::free(slots[i]) || is(slots[i])) return i;
    }
    template <class Is>
    size_t find(size_t home, Is&& is) const {
        return probe(slots_.data(), mask(), home, is);
    }
    size_t home(const Slot& s) const { return Keys::hash(s, shift_) & mask(); }

    // Whether one entry more would fill the table past MAX_FULL / OF.
    bool full() const { return (count_ + 1) * Keys::OF > slots_.size() * Keys::MAX_FULL; }

    // Put `s` (its key not in the table; the caller grew it if full()) in the first free
    // slot from its home; returns that slot.
    size_t place(const Slot& s) {
        const size_t mask = this->mask();
        size_t i = home(s);
        while (!Keys::free(slots_[i])) i = (i + 1) & mask;
        slots_[i] = s;
        ++count_;
        return i;
    }

    // `slots` slots (at least 16), every entry placed again in table order; `placed(slot,
    // index)` is told where each went.
    template <class Placed>
    void rehash(size_t slots, Placed&& placed) {
        std::vector<Slot> old;
        old.swap(slots_);
        reset(std::max<size_t>(16, slots));
        for (const Slot& s : old)
            if (!Keys::free(s)) placed(s, place(s));
    }
    void grow() {
        rehash(2 * slots_.size(), [](const Slot&, size_t) {});
    }

    // Free slot `i`, moving back each later entry of its run that may move there (its home
    // is not between the gap and it), so probes stay exact without tombstones; `moved(slot,
    // index)` is told each entry's new slot.
    template <class Moved>
    void erase(size_t i, Moved&& moved) {
        const size_t mask = this->mask();
        for (size_t j = (i + 1) & mask; !Keys::free(slots_[j]); j = (j + 1) & mask) {
            if (((j - home(slots_[j])) & mask) >= ((j - i) & mask)) {
                slots_[i] = slots_[j];
                moved(slots_[i], i);
                i = j;
            }
        }
        slots_[i] = Keys::free_slot();
        --count_;
    }
    void erase(size_t i) {
        erase(i, [](const Slot&, size_t) {});
    }

    // An empty table of `slots` slots (a power of two, or 0: no memory at all).
    void reset(size_t slots) {
        std::vector<Slot>(slots, Keys::free_slot()).swap(slots_);
        count_ = 0;
        shift_ = 64;
        for (size_t n = slots; n > 1; n >>= 1) --shift_;
    }

    // Whether the table is as the operations above leave it: a power of two of slots, at
    // most MAX_FULL / OF of them occupied, count() of them, each reached by a probe from its
    // home (no free slot between the home and it). For checks: O(slots x run length).
    bool exact() const {
        const size_t n = slots_.size();
        if (n & (n - 1)) return false;
        if (count_ * Keys::OF > n * Keys::MAX_FULL) return false;
        size_t occupied = 0;
        for (size_t i = 0; i < n; ++i) {
            if (Keys::free(slots_[i])) continue;
            ++occupied;
            for (size_t j = home(slots_[i]); j != i; j = (j + 1) & mask())
                if (Keys::free(slots_[j])) return false;
        }
        return occupied == count_;
    }

   private:
    std::vector<Slot> slots_;
    size_t count_ = 0;
    int shift_ = 64;
};

}  // namespace topicstore
