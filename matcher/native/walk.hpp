// The walks. plain_walk: a trie without '#', level by level. hash_walk: with '#' nodes,
// which stay active once reached; while more words remain than any pattern has after its
// last '#' (max_tail()), only nodes with a '#' below them (HAS_FEEDS) and not yet "spent"
// (every '#' below already active) can change the answer, so the walk carries only those;
// matcher/trie.py prunes the same way. Each node counts the '#' nodes below it, and the
// walk counts those it activates at their ancestors, so "spent" is one comparison.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core.hpp"

namespace topicstore {

// One step of the walk from ``ref`` over word ``w``: its literal child and its '*'
// child, kept when they have what the rest of the walk needs (``keep``'s flags). Only
// for nodes below a '#' (static_step): those never lead to a tail leaf.
inline void Core::step(uint32_t ref, uint32_t w, uint32_t keep, Scratch& next) const {
    if ((ref & HAS_KIDS) && w != UNKNOWN_WORD) {
        uint32_t c = child(ref & INDEX, w);
        if (c & keep) next.push_back(c);
    }
    if (ref & HAS_STAR) {
        uint32_t c = nodes_[ref & INDEX].star_child();
        if (c & keep) next.push_back(c);
    }
}

// child() on a table the caller read once (the walk's loops push into vectors, so the
// compiler cannot keep edges_'s pointer and size in registers across them by itself).
// The edge's slot, or a free slot (child NO_NODE) when there is no such edge.
inline const Edge* Core::probe(const Edge* edges, size_t mask, uint32_t parent,
                               uint32_t word) const {
    return edges + EdgeTable::probe(edges, mask, edge_bucket(parent, word), [=](const Edge& e) {
               return e.parent == parent && e.word == word;
           });
}

inline Ends Core::plain_walk(const uint32_t* words, size_t n) {
    // Without '#' there are no loops and every node has one parent edge, so a level
    // holds each node at most once, and the next level at most two references per node
    // (its literal child and its '*' child): room for that is made once per level and
    // the loop writes through a pointer (no capacity check per push; the vectors only
    // grow, their size() is room here, not the level's length).
    tail_ends_.clear();
    Scratch* bufs[2] = {&level_, &next_};  // this level's, the next one's
    int at = 0;
    uint32_t* level = room(level_, 1);
    size_t count = 1;
    level[0] = root_ref_;
    uint32_t* ids = room(end_ids_, 1);  // the last level's Node::ids (see Ends)
    ids[0] = nodes_[0].ids;
    const Edge* edges = edges_.data();
    const size_t mask = edges_.mask();
    for (size_t i = 0; i < n; ++i) {
        uint32_t w = words[i];
        uint32_t* next = room(*bufs[at ^ 1], 2 * count);
        size_t m = 0;
        const bool known = w != UNKNOWN_WORD;
        if (count > 1) prefetch_level(level, count, w);
        if (i + 1 < n) {
            // A node is worth carrying to the next level only if it has edges to follow.
            for (size_t j = 0; j < count; ++j) {
                uint32_t ref = level[j];
                if ((ref & HAS_KIDS) && known) {
                    uint32_t c = probe(edges, mask, ref & INDEX, w)->child;
                    if (c & HAS_TAIL) {
                        reach_tail(c, i + 1);
                    } else if (c & HAS_EDGES) {
                        next[m++] = c;
                    }
                }
                if (ref & HAS_STAR) {
                    uint32_t c = nodes_[ref & INDEX].star_child();
                    if (c & HAS_EDGES) next[m++] = c;
                }
            }
        } else {
            // The last word: only nodes with ids count, and their ids come along, from
            // the edge probed for a literal child (no read of the node), from the node
            // for a '*' child. A tail leaf here has words left over: no match.
            ids = room(end_ids_, 2 * count);
            for (size_t j = 0; j < count; ++j) {
                uint32_t ref = level[j];
                if ((ref & HAS_KIDS) && known) {
                    const Edge* e = probe(edges, mask, ref & INDEX, w);
                    if ((e->child & (HAS_IDS | HAS_TAIL)) == HAS_IDS) {
                        next[m] = e->child;
                        ids[m++] = e->ids;
                    }
                }
                if (ref & HAS_STAR) {
                    uint32_t c = nodes_[ref & INDEX].star_child();
                    if (c & HAS_IDS) {
                        next[m] = c;
                        ids[m++] = nodes_[c & INDEX].ids;
                    }
                }
            }
        }
        at ^= 1;
        level = next;
        count = m;
        if (count == 0) break;
    }
    if (!tail_ends_.empty()) {
        level = room(*bufs[at], count + tail_ends_.size());  // keeps the level's entries
        ids = room(end_ids_, count + tail_ends_.size());
        size_t before = count;
        count = tails_matched(words, n, level, count);
        ids_from_nodes(level, ids, before, count);
    }
    prefetch_results(level, ids, count);
    return Ends{level, ids, count};
}

// The caller of a walk reads the ends' id vectors next, and the result kept for one
// (cached_) while kept results are used: ask for all those lines at once.
inline void Core::prefetch_results(const uint32_t* level, const uint32_t* ids, size_t count) const {
    const bool kept = !cached_.empty() && !gate_.bypassing();
    for (size_t j = 0; j < count; ++j) {
        const uint32_t ref = level[j];
        if (ref & HAS_MANY) __builtin_prefetch(&idvecs_[ids[j]]);
        if (kept && (ref & HAS_IDS)) __builtin_prefetch(&cached_[cached_bucket(ref & INDEX)]);
    }
}

// `v`'s storage with room for at least `need` entries (it grows, never shrinks; its
// entries are kept).
inline uint32_t* Core::room(Scratch& v, size_t need) {
    if (v.size() < need) v.resize(std::max(need, 2 * v.size()));
    return v.data();
}

// A level's probes are independent of each other: asking for all their cache lines
// first overlaps the misses (on a trie larger than the cache the walk is bound by them).
inline void Core::prefetch_level(const uint32_t* level, size_t count, uint32_t w) const {
    size_t mask = edges_.mask();
    for (size_t j = 0; j < count; ++j) {
        uint32_t ref = level[j];
        if ((ref & HAS_KIDS) && w != UNKNOWN_WORD)
            __builtin_prefetch(&edges_[edge_bucket(ref & INDEX, w) & mask]);
        if (ref & HAS_STAR) __builtin_prefetch(&nodes_[ref & INDEX]);
    }
}

// A reached '#' node stays active at every later position, so it is set aside (stamped
// with this walk's epoch, so it enters once) and its literal edges for the topic's
// distinct words are indexed per word (by_word_): a level costs the nodes that match
// its word. Each node is processed at most once per level: nodes x (words + 1) steps.
inline void Core::reach(uint32_t ref) {
    if (!(ref & HAS_HASH)) return;
    // The '#' node's stamp says whether it is active already (its line is read once
    // more at the end, for its ids, when it has some).
    uint32_t href = nodes_[ref & INDEX].hash;
    Node& h_node = nodes_[href & INDEX];
    if (h_node.stamp() == epoch_) return;
    h_node.set_stamp(epoch_);
    active_.push_back(href);
    if (counting_) count_active(href & INDEX);
    if (!(href & HAS_KIDS)) return;
    uint32_t h = href & INDEX;
    const uint32_t* slot_word = slot_word_.data();
    const size_t k = slot_word_.size();
    const Edge* edges = edges_.data();
    const size_t mask = edges_.mask();
    std::vector<uint32_t>* lists = by_word_.data();
    for (size_t slot = 0; slot < k; ++slot) {
        uint32_t c = probe(edges, mask, h, slot_word[slot])->child;
        if (c != NO_NODE) lists[slot].push_back(c);
    }
}

inline void Core::reset_memos() {
    for (uint32_t index : memo_touched_) {
        memo_[index].done = memo_[index].reached = 0;
        memo_[index].out.clear();
    }
    memo_touched_.clear();
}

// `prove`: before the cut, drop from the kept contribution for good what no longer
// matters (nodes without HAS_FEEDS, spent ones; see hash_walk).
inline void Core::static_step(uint32_t prev, uint32_t len, uint32_t slot, uint32_t w,
                              uint32_t keep, bool prove, Scratch& next) {
    const size_t k = slot_word_.size();
    if (k >= MEMO_SLOTS) {  // too many distinct words for the table: step directly
        size_t from = next.size();
        for (uint32_t j = 0; j < len; ++j) {
            step(by_word_[prev][j], w, keep, next);
        }
        for (size_t j = from; j < next.size(); ++j) reach(next[j]);
        return;
    }
    size_t index = prev * (MEMO_SLOTS + 1) + (slot == UINT32_MAX ? MEMO_SLOTS : slot);
    Memo& m = memo_[index];
    if (m.done == 0 && m.out.empty()) {
        memo_touched_.push_back(static_cast<uint32_t>(index));
        m.out.reserve(SCRATCH);
    }
    if (len > m.done) {
        // Two entries at most per node: room first, then unchecked writes through
        // locals (nothing here touches the lists, so their pointers hold), and a probed
        // child is written always and kept if it is a node: no branch on whether it
        // exists, the walk's least predictable.
        const uint32_t* list = by_word_[prev].data();
        const size_t at = m.out.size();
        m.out.resize(at + 2 * static_cast<size_t>(len - m.done));
        uint32_t* out = m.out.data() + at;
        const Edge* edges = edges_.data();
        const size_t mask = edges_.mask();
        const Node* nodes = nodes_.data();
        const bool known = w != UNKNOWN_WORD;
        for (uint32_t j = m.done; j < len; ++j) {
            uint32_t ref = list[j];
            if ((ref & HAS_KIDS) && known) {
                *out = probe(edges, mask, ref & INDEX, w)->child;
                out += *out != NO_NODE;
            }
            if (ref & HAS_STAR) *out++ = nodes[ref & INDEX].star_child();
        }
        m.out.resize(static_cast<size_t>(out - m.out.data()));
        m.done = len;
    }
    if (prove) {
        // Dropped entries need no reach(): without a '#' below, or with it active.
        // (spent() does not touch m.out.) Whether a node is spent changes only when a
        // '#' node becomes active, so with none activated since this memo's last pass
        // only the entries added since are checked (a long topic activates most of its
        // '#' nodes in its first words, so later levels mostly skip the pass).
        const size_t active = active_.size();
        const size_t from = m.proved_active == active ? m.reached : 0;
        size_t kept = from, reached = from;
        uint32_t* out = m.out.data();
        const size_t size = m.out.size();
        for (size_t j = from; j < size; ++j) {
            uint32_t c = out[j];
            if (!(c & HAS_FEEDS) || spent(c & INDEX)) continue;
            reached += j < m.reached;
            out[kept++] = c;
        }
        m.out.resize(kept);
        m.reached = static_cast<uint32_t>(reached);
        m.proved_active = static_cast<uint32_t>(active);
        next.insert(next.end(), m.out.begin(), m.out.end());
    } else {
        size_t from = next.size();
        next.resize(from + m.out.size());
        uint32_t* out = next.data() + from;
        for (uint32_t c : m.out) {
            *out = c;
            out += (c & keep) != 0;
        }
        next.resize(static_cast<size_t>(out - next.data()));
    }
    // Only the entries new to `out` can reach a '#' node not yet active (reach() does
    // not touch m.out).
    const uint32_t* fresh = m.out.data();
    for (size_t j = m.reached; j < m.out.size(); ++j) reach(fresh[j]);
    m.reached = static_cast<uint32_t>(m.out.size());
}

// Whether node `x` is spent in this walk: every '#' node below it is active already,
// so carrying it changes nothing before the cut (see hash_walk). reach() counts each
// activation at the '#' node's ancestors while the walk prunes (counting_), so this is
// one comparison; it holds for the rest of the walk (active '#' nodes stay active).
// It counts the '#' nodes below through any word, not only the topic's: a node with
// one the topic cannot reach is carried to the cut (keeping is always safe).
inline bool Core::spent(uint32_t x) const {
    const ActiveBelow& p = active_below_[x];
    return p.epoch == epoch_ && p.active == hashes_below_[x];
}

// '#' node `h` became active in the pruned part of a walk: one more active below each
// of its ancestors. O(depth), once per '#' node and walk.
inline void Core::count_active(uint32_t h) {
    each_above(h, [&](uint32_t a) {
        ActiveBelow& p = active_below_[a];
        if (p.epoch != epoch_) p = ActiveBelow{epoch_, 0};
        ++p.active;
    });
}

// active_below_ to one per node, the new ones empty (epoch 0): one memset, not a
// constructor call per node.
inline void Core::grow_active_below() {
    size_t from = active_below_.size();
    active_below_.resize(nodes_.size());
    std::memset(static_cast<void*>(active_below_.data() + from), 0,
                (active_below_.size() - from) * sizeof(ActiveBelow));
}

// The '#' walk's scratch, allocated once (by the first '#' pattern's add(): a first
// match would otherwise pay for a few dozen allocations and their first touch).
inline void Core::prepare_hash_walk() {
    if (!memo_.empty()) return;
    memo_.resize(MEMO_SLOTS * (MEMO_SLOTS + 1));
    level_.reserve(4 * SCRATCH);
    next_.reserve(4 * SCRATCH);
    active_.reserve(SCRATCH);
    memo_touched_.reserve(memo_.size());
    slot_word_.reserve(MEMO_SLOTS);
    reached_.reserve(MEMO_SLOTS);
    tail_ends_.reserve(MEMO_SLOTS);
    if (by_word_.size() < MEMO_SLOTS) by_word_.resize(MEMO_SLOTS);
    for (auto& list : by_word_) list.reserve(SCRATCH);
}

inline Ends Core::hash_walk(const uint32_t* words, size_t n, std::vector<uint32_t>* level_sizes) {
    prepare_hash_walk();  // (a matcher without '#' walks here for level_sizes)
    if (++epoch_ == 0) {  // wrapped: forget every stamp
        for (Node& node : nodes_)
            if (node.is_hash()) node.set_stamp(0);
        std::memset(static_cast<void*>(active_below_.data()), 0,
                    active_below_.size() * sizeof(ActiveBelow));
        epoch_ = 1;
    }
    // Distinct known words of the topic -> slots.
    slot_of_.assign(n, UINT32_MAX);
    slot_word_.clear();
    for (size_t i = 0; i < n; ++i) {
        uint32_t w = words[i];
        if (w == UNKNOWN_WORD) continue;
        uint32_t slot = 0;
        while (slot < slot_word_.size() && slot_word_[slot] != w) ++slot;
        if (slot == slot_word_.size()) slot_word_.push_back(w);
        slot_of_[i] = slot;
    }
    const size_t k = slot_word_.size();
    if (by_word_.size() < k) {  // a topic of more distinct words than any before
        size_t from = by_word_.size();
        by_word_.resize(k);
        for (size_t slot = from; slot < k; ++slot) by_word_[slot].reserve(SCRATCH);
    }
    for (size_t slot = 0; slot < k; ++slot) by_word_[slot].clear();
    reached_.assign(k, 0);
    reset_memos();
    // Pruning (exact, as matcher/trie.py's walk_from), while more words remain after a
    // step than max_tail(): a node with no '#' below it cannot reach an id any more, and
    // one whose '#' nodes are all active changes nothing (they stay active, and their
    // children join every level through by_word_). So until the cut a step keeps only
    // nodes tagged HAS_FEEDS, and the memoized static part also drops spent ones for
    // good; at the cut the memos start over in full.
    const size_t cut = n > max_tail_ ? n - max_tail_ : 0;
    bool pruning = cut > 1;
    const bool prove = pruning && k < MEMO_SLOTS;
    if (prove && active_below_.size() < nodes_.size()) grow_active_below();
    counting_ = prove;  // before the root's reach()
    active_.clear();
    tail_ends_.clear();
    // A level: `level` (nodes reached through literal and '*' edges) plus its static
    // part, by_word_[static_slot][:static_len] (children of active '#' nodes).
    Scratch& level = level_;
    Scratch& next = next_;
    level.clear();
    level.push_back(root_ref_);
    uint32_t static_slot = UINT32_MAX, static_len = 0;
    reach(level[0]);
    if (level_sizes) level_sizes->push_back(static_cast<uint32_t>(level.size() + active_.size()));
    for (size_t i = 0; i < n; ++i) {
        uint32_t w = words[i];
        uint32_t slot = slot_of_[i];
        if (pruning && i + 1 >= cut) {
            pruning = false;
            counting_ = false;
            reset_memos();
        }
        // As in plain_walk, plus HAS_HASH: reach() needs the node to set its '#' aside
        // (which then matches after the last word too).
        uint32_t keep = pruning ? HAS_FEEDS : (i + 1 < n ? HAS_EDGES : HAS_IDS) | HAS_HASH;
        // This level's static part: the list as it is now, before this level's reach()
        // adds the children of '#' nodes reached here (they match from the next word).
        uint32_t len = slot == UINT32_MAX ? 0 : static_cast<uint32_t>(by_word_[slot].size());
        if (level.size() > 1) prefetch_level(level.data(), level.size(), w);
        // Each node yields two refs at most: write them unchecked. Those with a '#' child
        // also go to `reaching` (only they can make reach() do anything): no loop over
        // all of them afterwards, and no branch per entry on whether it has one.
        next.resize(2 * level.size());
        uint32_t* out = next.data();
        uint32_t* const reaching = room(reaching_, 2 * level.size());
        uint32_t* reach_out = reaching;
        {
            const Edge* edges = edges_.data();
            const size_t mask = edges_.mask();
            const Node* nodes = nodes_.data();
            const bool known = w != UNKNOWN_WORD;
            // A stepped child is written always and kept if wanted: no branch on it.
            auto emit = [&](uint32_t c) {
                const bool kept = (c & keep) != 0;
                *out = c;
                out += kept;
                *reach_out = c;
                reach_out += kept & ((c & HAS_HASH) != 0);
            };
            for (uint32_t ref : level) {
                if ((ref & HAS_KIDS) && known) {
                    uint32_t c = probe(edges, mask, ref & INDEX, w)->child;
                    if (c & HAS_TAIL) {
                        reach_tail(c, i + 1);
                    } else {
                        emit(c);
                    }
                }
                if (ref & HAS_STAR) emit(nodes[ref & INDEX].star_child());
            }
        }
        next.resize(static_cast<size_t>(out - next.data()));
        for (const uint32_t* r = reaching; r < reach_out; ++r) reach(*r);  // (never touches reaching_)
        if (static_len) static_step(static_slot, static_len, slot, w, keep, prove && pruning, next);
        if (slot != UINT32_MAX) {
            for (uint32_t j = reached_[slot]; j < len; ++j) reach(by_word_[slot][j]);
            if (len > reached_[slot]) reached_[slot] = len;
        }
        if (level_sizes)
            level_sizes->push_back(static_cast<uint32_t>(next.size() + len + active_.size()));
        level.swap(next);
        static_slot = slot;
        static_len = len;
        if (level.empty() && len == 0 && active_.empty()) break;
    }
    if (static_len)
        for (uint32_t j = 0; j < static_len; ++j) {
            uint32_t ref = by_word_[static_slot][j];
            if (ref & HAS_IDS) level.push_back(ref);
        }
    level.insert(level.end(), active_.begin(), active_.end());
    if (!tail_ends_.empty()) {
        size_t count = level.size();
        level.resize(count + tail_ends_.size());
        level.resize(tails_matched(words, n, level.data(), count));
    }
    // The '#' walk's ends are reached through '#' nodes and memo lists, not from one
    // probed edge each: their ids fields come from the nodes.
    uint32_t* ids = room(end_ids_, level.size());
    ids_from_nodes(level.data(), ids, 0, level.size());
    return Ends{level.data(), ids, level.size()};
}

// ids[from:to] := the Node::ids of the ends level[from:to] that hold ids (Ends::ids),
// read from the nodes: for ends not reached through a probed edge.
inline void Core::ids_from_nodes(const uint32_t* level, uint32_t* ids, size_t from,
                                 size_t to) const {
    for (size_t j = from; j < to; ++j)
        if (level[j] & HAS_IDS) ids[j] = nodes_[level[j] & INDEX].ids;
}

}  // namespace topicstore
