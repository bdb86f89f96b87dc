// Kept results: the result (an Ids of _native.pyx) of one end node, or of a set of end
// nodes, kept for the next match ending on the same nodes, in bounded tables; any write
// makes them stale.
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

// The kept result (Ids) of node `i`'s ids (borrowed), or nullptr.
inline PyObject* Core::cached(uint32_t i) const {
    if (cached_.empty()) return nullptr;
    const CachedSlot& c = cached_[cached_bucket(i)];
    return c.node_plus1 == i + 1 ? c.result : nullptr;
}

// Keep `result` (a new reference is taken) as node `i`'s; the caller checked that no
// write ran since it read the ids (the version did not move).
inline void Core::keep_cached(uint32_t i, PyObject* result) {
    if (cached_.empty()) cached_.resize(CACHED_SLOTS);
    CachedSlot& c = cached_[cached_bucket(i)];
    PyObject* old = c.result;
    Py_INCREF(result);
    c.result = result;
    c.node_plus1 = i + 1;
    Py_XDECREF(old);  // an Ids: frees memory, runs no Python code
}

// The kept result (Ids) for the sorted end nodes `nodes[:n]` (borrowed), or nullptr. Any
// write makes every kept result stale (the version moves on), so none is ever served
// for a structure it was not built from.
inline PyObject* Core::combo_get(const uint32_t* nodes, uint32_t n) const {
    if (combos_.empty()) return nullptr;
    const ComboSlot* pair = &combos_[combo_bucket(nodes, n)];
    for (int k = 0; k < 2; ++k) {
        const ComboSlot& c = pair[k];
        if (c.version == version_ && c.n == n && same_nodes(c.nodes, nodes, n)) return c.result;
    }
    return nullptr;
}

// A loop, not memcmp: at most COMBO_NODES entries, fewer than a library call is worth.
inline bool Core::same_nodes(const uint32_t* a, const uint32_t* b, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

// Keep `result` (a new reference is taken) for `nodes[:n]` if no write happened since
// `version` was read (the walk it came from is still the structure's).
inline void Core::combo_put(const uint32_t* nodes, uint32_t n, uint64_t version, PyObject* result) {
    if (version != version_ || n > COMBO_NODES) return;
    if (combos_.empty()) combos_.resize(COMBO_SLOTS);
    ComboSlot* pair = &combos_[combo_bucket(nodes, n)];
    PyObject* old = pair[1].result;
    if (pair[0].version == version_) {
        pair[1] = pair[0];  // its reference moves along
    } else {
        old = pair[0].result;  // stale: dropped, the second slot stays
    }
    Py_INCREF(result);
    ComboSlot& c = pair[0];
    c.result = result;
    c.version = version_;
    c.n = n;
    std::memcpy(c.nodes, nodes, n * sizeof(uint32_t));
    Py_XDECREF(old);  // an Ids: frees memory, runs no Python code
}

inline void Core::drop_cached(uint32_t i) {
    if (cached_.empty()) return;
    CachedSlot& c = cached_[cached_bucket(i)];
    if (c.node_plus1 != i + 1) return;
    PyObject* old = c.result;
    c = CachedSlot();
    Py_XDECREF(old);  // an Ids: frees memory, runs no Python code
}

}  // namespace topicstore
