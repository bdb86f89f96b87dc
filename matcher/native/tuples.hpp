// The tuple index: short patterns without '#' (most routing keys) are also held in one
// hash table keyed by a pattern's length, '*' positions and words, kept beside the trie as
// the edges are (every end node's entry follows its reference and ids). It is kept only
// while it holds every pattern (no '#' pattern, none longer than TUPLE_WORDS words; see
// settle_tuples); then a topic of up to TUPLE_WORDS words is a few independent probes, one
// per '*' shape, instead of dependent levels (lengths with many shapes are walked). It
// costs a 32-byte entry per end node (the table at most 3/4 full) and 4 bytes per node.
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

// What a walk finds, without walking, while every end node is in the index (no '#'
// pattern, none longer than TUPLE_WORDS) and the topic's length has at most MAX_SHAPES
// shapes: one probe per shape, all independent (their lines are asked for at once), so
// no level waits for the one before it. "Tuple space search" (Srinivasan et al., 1999;
// Open vSwitch's classifier); bench/walk_layouts.py compares it with the level walk.
inline Ends Core::tuple_walk(const uint32_t* words, size_t n) {
    const auto& shapes = shapes_[n];
    uint32_t keys[MAX_SHAPES][TUPLE_WORDS];
    uint32_t wanted[MAX_SHAPES];
    size_t slots[MAX_SHAPES];
    size_t probes = 0;
    const Tuple* table = tuples_.data();
    const size_t mask = tuples_.mask();
    for (const auto& [shape, count] : shapes) {
        (void)count;
        bool known = true;
        for (size_t i = 0; i < n; ++i) {
            const uint32_t w = (shape >> i) & 1 ? STAR : words[i];
            known &= w != UNKNOWN_WORD;
            keys[probes][i] = w;
        }
        if (!known) continue;  // a word no pattern names where this shape needs one
        wanted[probes] = shape;
        slots[probes] = tuple_hash(shape, keys[probes], n) & mask;
        __builtin_prefetch(table + slots[probes]);
        ++probes;
    }
    uint32_t* level = room(level_, probes + 1);
    uint32_t* ids = room(end_ids_, probes + 1);
    size_t count = 0;
    for (size_t q = 0; q < probes; ++q) {
        const Tuple& t = table[TupleTable::probe(table, mask, slots[q], [&](const Tuple& t) {
            return t.shape == wanted[q] && std::equal(keys[q], keys[q] + n, t.words);
        })];
        if (TupleKeys::free(t)) continue;
        level[count] = t.ref;
        ids[count++] = t.ids;
    }
    prefetch_results(level, ids, count);
    return Ends{level, ids, count};
}

// The key of the pattern ending at node `i` (its words from the root, a tail leaf's
// included; STAR for '*'): its length, or 0 when the index cannot hold it (a '#', more
// than TUPLE_WORDS words, the root). O(depth), at most TUPLE_WORDS + 1 steps.
inline uint32_t Core::tuple_key(uint32_t i, uint32_t* words, uint32_t* shape) const {
    uint32_t rest = nodes_[i].is_tail() ? tails_[nodes_[i].tail_at()] : 0;
    uint32_t depth = 0;
    for (uint32_t x = i; x != 0; x = nodes_[x].parent)
        if (++depth + rest > TUPLE_WORDS || nodes_[x].label == HASH) return 0;
    const uint32_t n = depth + rest;
    if (n == 0) return 0;
    uint32_t at = depth;
    for (uint32_t x = i; x != 0; x = nodes_[x].parent) words[--at] = nodes_[x].label;
    for (uint32_t k = 0; k < rest; ++k) words[depth + k] = tails_[nodes_[i].tail_at() + 1 + k];
    uint32_t mask = 0;
    for (uint32_t k = 0; k < n; ++k)
        if (words[k] == STAR) mask |= 1u << k;
    *shape = n << 16 | mask;
    return n;
}

// Node `i`'s entry follows what the node is now (called wherever its reference or ids
// field changes: retag, unfold). An end node's key never changes while it holds ids
// (unfold keeps the leaf's words), so an entry is rewritten in place or comes and goes.
inline void Core::sync_tuple(uint32_t i) {
    const uint32_t at = tuple_at_[i];
    const bool ends = nodes_[i].live() && nodes_[i].nids != 0;
    if (!ends) {
        if (at == UNTUPLED) --untupled_;
        else if (at != NO_TUPLE) erase_tuple(at);
        tuple_at_[i] = NO_TUPLE;
        return;
    }
    if (at == UNTUPLED) return;
    if (at != NO_TUPLE) {
        tuples_[at].ref = i | tags(i);
        tuples_[at].ids = nodes_[i].ids;
        return;
    }
    Tuple t{};
    const uint32_t n = tuple_key(i, t.words, &t.shape);
    if (n == 0) {
        ++untupled_;
        tuple_at_[i] = UNTUPLED;
        return;
    }
    if (!tuples_on_) return;  // holdable: build_tuples() enters it when the index is back
    t.ref = i | tags(i);
    t.ids = nodes_[i].ids;
    if (tuples_.full()) grow_tuples();  // add() made room first
    place_tuple(t);
    count_shape(shapes_[n], t.shape, 1);
}

// One entry of `shape` more (delta 1) or fewer (-1) in `shapes` (a length's shapes in
// use with their entry counts; a shape leaves when its count reaches 0).
inline void Core::count_shape(std::vector<std::pair<uint32_t, uint32_t>>& shapes,
                              uint32_t shape, int delta) {
    auto s = std::find_if(shapes.begin(), shapes.end(),
                          [&](const auto& p) { return p.first == shape; });
    if (s == shapes.end()) s = shapes.emplace(shapes.end(), shape, 0);
    s->second += static_cast<uint32_t>(delta);
    if (s->second == 0) shapes.erase(s);
}

inline void Core::place_tuple(const Tuple& t) {
    tuple_at_[t.ref & INDEX] = static_cast<uint32_t>(tuples_.place(t));
}

// Grown before the trie changes (add) so that an entry's insertion allocates nothing.
inline void Core::reserve_tuple() {
    if (tuples_on_ && tuples_.full()) grow_tuples();
}

inline void Core::grow_tuples() {
    tuples_.rehash(2 * tuples_.slots(), [this](const Tuple& t, size_t i) {
        tuple_at_[t.ref & INDEX] = static_cast<uint32_t>(i);
    });
}

inline void Core::erase_tuple(uint32_t i) {
    const uint32_t shape = tuples_[i].shape;
    tuples_.erase(i, [this](const Tuple& t, size_t to) {
        tuple_at_[t.ref & INDEX] = static_cast<uint32_t>(to);
    });
    count_shape(shapes_[shape >> 16], shape, -1);
}

// After a write: the index is kept only while it can answer, that is while every end
// node is in it. A pattern it cannot hold ('#', more than TUPLE_WORDS words) drops it,
// memory and all (an index that cannot answer would still cost an entry per end node and
// its upkeep on every write), and the write that removes the last
// such pattern builds it again, O(end nodes).
inline void Core::settle_tuples() {
    if (untupled_ != 0 && tuples_on_) drop_tuples();
    else if (untupled_ == 0 && !tuples_on_) build_tuples();
}

inline void Core::drop_tuples() {
    tuples_.reset(0);
    for (uint32_t& at : tuple_at_)
        if (at != UNTUPLED) at = NO_TUPLE;
    for (auto& shapes : shapes_) shapes.clear();
    tuples_on_ = false;
}

// All or nothing: out of memory, the index stays off and the walk answers.
inline void Core::build_tuples() {
    try {
        size_t ends = 0;
        for (const Node& n : nodes_) ends += n.live() && n.nids != 0;
        size_t size = 16;
        while ((ends + 1) * TupleKeys::OF > size * TupleKeys::MAX_FULL) size *= 2;
        tuples_.reset(size);
        tuples_on_ = true;
        for (uint32_t i = 0; i < nodes_.size(); ++i)
            if (nodes_[i].live() && nodes_[i].nids != 0) sync_tuple(i);
    } catch (const std::bad_alloc&) {
        drop_tuples();
    }
}

}  // namespace topicstore
