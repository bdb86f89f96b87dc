// The invariants of the structure, checked from scratch (for tests: Core::check is the
// native engine's _check()).
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

// An empty string when every invariant holds, else what is broken.
inline std::string Core::check() const {
    uint32_t live = 0, hashes = 0, ids = 0;
    size_t live_text_bytes = 0, pooled = 0, live_tail = 0;
    std::vector<uint32_t> tail_words(words_.size(), 0);
    if (root_ref_ != tags(0)) return "root tag";
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
        const Node& n = nodes_[i];
        if (!n.live()) {
            if (cached(i) || n.texts != NO_TEXT || n.nids != 0) return "freed node holds data";
            continue;
        }
        ++live;
        hashes += n.is_hash();
        ids += n.nids;
        if (i != 0 && n.empty()) return "unpruned empty node";
        if (n.is_hash() && n.hash != NO_NODE) return "non-canonical";
        if (n.is_hash() && n.stamp() > epoch_) return "stamp from a future walk";
        if (n.is_tail()) {
            uint32_t at = n.tail_at();
            if (n.nids == 0 || n.nchildren != 0 || n.hash != NO_NODE || n.label >= words_.size())
                return "tail leaf with children or without ids";
            if (at >= tails_.size() || tails_[at] == 0 || at + tails_[at] >= tails_.size())
                return "tail outside the tail arena";
            for (uint32_t k = 1; k <= tails_[at]; ++k) {
                if (tails_[at + k] >= words_.size()) return "tail word";
                ++tail_words[tails_[at + k]];
            }
            live_tail += 1 + tails_[at];
            for (uint32_t a = n.parent; a != 0; a = nodes_[a].parent)
                if (nodes_[a].is_hash()) return "tail leaf below a '#'";
        }
        if (n.hash != NO_NODE && !nodes_[n.hash & INDEX].is_hash()) return "hash edge to a non-# node";
        uint32_t star = n.star();
        if (star != NO_NODE && star != ((star & INDEX) | tags(star & INDEX))) return "star tag";
        if (n.hash != NO_NODE && n.hash != ((n.hash & INDEX) | tags(n.hash & INDEX))) return "hash tag";
        if (n.nids == 0 && n.texts != NO_TEXT) return "texts without ids";
        if (n.nids >= 2) {
            if (n.ids >= idvecs_.size() || idvecs_[n.ids].size() != n.nids) return "id vector size";
            ++pooled;
        }
        if (star != NO_NODE &&
            (nodes_[star & INDEX].parent != i || nodes_[star & INDEX].label != STAR))
            return "star child's parent link";
        if (n.hash != NO_NODE &&
            (nodes_[n.hash & INDEX].parent != i || nodes_[n.hash & INDEX].label != HASH))
            return "hash child's parent link";
        if (i != 0) {
            const Node& p = nodes_[n.parent];
            if (!p.live()) return "dead parent";
            if (n.label == STAR ? (p.star() & INDEX) != i
                : n.label == HASH ? (p.hash & INDEX) != i
                                  : (child(n.parent, n.label) & INDEX) != i)
                return "parent does not lead here";
        }
        if (n.nids != 0) {
            std::vector<std::pair<uint32_t, uint32_t>> refs;  // (text, ids using it)
            std::string path = path_text(i);
            for (uint32_t t = n.texts; t != NO_TEXT; t = texts_[t].next) {
                if (t >= texts_.size() || texts_[t].refs == 0) return "dead text in a node";
                if (texts_[t].off + static_cast<size_t>(texts_[t].len) > arena_.size())
                    return "text outside the arena";
                if (path.compare(0, std::string::npos, arena_.data() + texts_[t].off,
                                 texts_[t].len) == 0)
                    return "stored text equal to the path's";
                refs.emplace_back(t, 0);
                live_text_bytes += texts_[t].len;
            }
            const uint32_t* held = ids_of(i);
            for (uint32_t pos = 0; pos < n.nids; ++pos) {
                const IdSlot* s = find_id(held[pos]);
                if (s == nullptr || s->node != i || s->pos != pos) return "id table mismatch";
                if (s->text == NO_TEXT) continue;  // the path's text
                bool found = false;
                for (auto& r : refs)
                    if (r.first == s->text) {
                        ++r.second;
                        found = true;
                    }
                if (!found) return "id's text not in its node";
            }
            for (const auto& r : refs)
                if (r.second != texts_[r.first].refs) return "text refcount";
        }
    }
    for (uint32_t k = 0; k < cached_.size(); ++k) {
        const CachedSlot& c = cached_[k];
        if (c.node_plus1 == 0) {
            if (c.result != nullptr) return "cached result in an empty slot";
            continue;
        }
        uint32_t i = c.node_plus1 - 1;
        if (i >= nodes_.size() || cached_bucket(i) != k) return "cached slot of another node";
        if (!nodes_[i].live() || c.result == nullptr) return "cached result of a freed node";
        if (static_cast<size_t>(PyObject_Length(c.result)) != nodes_[i].nids)
            return "stale cached result";
        for (uint32_t pos = 0; pos < nodes_[i].nids; ++pos) {
            PyObject* id = PyLong_FromUnsignedLong(ids_of(i)[pos]);
            if (id == nullptr) throw std::bad_alloc();
            int has = PySequence_Contains(c.result, id);
            Py_DECREF(id);
            if (has != 1) return "cached result lacks an id";
        }
    }
    if (pooled + free_idvecs_.size() != idvecs_.size()) return "id vector pool accounting";
    for (uint32_t v : free_idvecs_)
        if (v >= idvecs_.size() || idvecs_[v].size() != 0) return "free id vector in use";
    if (live != node_count_) return "node count";
    if (live_text_bytes + garbage_ != arena_.size()) return "text arena accounting";
    if (live_tail + tail_garbage_ != tails_.size()) return "tail arena accounting";
    if (hashes != hash_count_) return "hash count";
    if (!idslots_.exact()) return "id table";
    if (ids != idslots_.count()) return "id count";
    uint32_t edges = 0;
    std::vector<uint32_t> children(nodes_.size(), 0), wrefs(words_.size(), 0);
    for (const Edge& e : edges_) {
        if (e.child == NO_NODE) continue;
        ++edges;
        uint32_t c = e.child & INDEX;
        if (!nodes_[c].live() || nodes_[c].parent != e.parent) return "edge target";
        if (e.child != (c | tags(c))) return "edge tag";
        if (e.ids != nodes_[c].ids) return "edge ids";
        if (e.word >= words_.size() || words_[e.word].refs == 0) return "edge word";
        ++children[e.parent];
        ++wrefs[e.word];
    }
    if (!edges_.exact()) return "edge table";
    if (edges != edges_.count()) return "edge count";
    for (uint32_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].live() && children[i] != nodes_[i].nchildren) return "child count";
    uint32_t words = 0;
    for (uint32_t w = 0; w < words_.size(); ++w) {
        if (wrefs[w] + tail_words[w] != words_[w].refs) return "word refcount";
        if (words_[w].refs) {
            ++words;
            if (word_id(words_[w].text.data(), static_cast<uint32_t>(words_[w].text.size())) != w)
                return "word table";
        }
    }
    if (!wordslots_.exact()) return "word table slots";
    if (words != wordslots_.count()) return "word count";
    // The tail counts, recomputed from each id's end node (count_pattern), and the '#'
    // nodes below each node, from each '#' node (count_hash).
    std::vector<uint32_t> tails(tail_counts_.size(), 0);
    for (const IdSlot& slot : idslots_) {
        if (IdKeys::free(slot)) continue;
        const uint32_t tail = tail_length(slot.node);
        if (tail >= tails.size()) return "tail count missing";
        ++tails[tail];
    }
    if (hashes_below_.size() != nodes_.size()) return "hashes below size";
    std::vector<uint32_t> below(nodes_.size(), 0);
    for (uint32_t i = 1; i < nodes_.size(); ++i)
        if (nodes_[i].live() && nodes_[i].is_hash())
            each_above(i, [&](uint32_t a) { ++below[a]; });
    if (below != hashes_below_) return "hashes below";
    if (tails != tail_counts_) return "tail counts";
    uint32_t longest = 0;
    for (uint32_t t = 0; t < tails.size(); ++t)
        if (tails[t]) longest = t;
    if (longest != max_tail_) return "max tail";
    return check_tuples();
}

// The index against the trie: while on, every end node's entry (or UNTUPLED), nothing
// else; off exactly while some end node is UNTUPLED, and then empty.
inline std::string Core::check_tuples() const {
    if (tuples_on_ != (untupled_ == 0)) return "tuple index on/off";
    if (tuple_at_.size() != nodes_.size()) return "tuple slots per node";
    uint32_t entries = 0, untupled = 0;
    std::vector<std::pair<uint32_t, uint32_t>> shapes[TUPLE_WORDS + 1];
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
        const uint32_t at = tuple_at_[i];
        if (!nodes_[i].live() || nodes_[i].nids == 0) {
            if (at != NO_TUPLE) return "tuple of a node that ends no pattern";
            continue;
        }
        uint32_t words[TUPLE_WORDS], shape = 0;
        const uint32_t n = tuple_key(i, words, &shape);
        if (n == 0) {
            if (at != UNTUPLED) return "untupled end node not counted";
            ++untupled;
            continue;
        }
        if (!tuples_on_) {
            if (at != NO_TUPLE) return "tuple slot while the index is off";
            continue;
        }
        if (at >= tuples_.slots()) return "end node without its tuple";
        const Tuple& t = tuples_[at];
        if (t.shape != shape || !std::equal(words, words + n, t.words)) return "tuple key";
        if (t.ref != (i | tags(i)) || t.ids != nodes_[i].ids) return "tuple mirror";
        ++entries;
        count_shape(shapes[n], shape, 1);
    }
    if (entries != tuples_.count() || untupled != untupled_) return "tuple counts";
    if (!tuples_on_) return tuples_.slots() == 0 ? "" : "tuples kept while off";
    if (!tuples_.exact()) return "tuple table";
    for (size_t i = 0; i < tuples_.slots(); ++i)
        if (!TupleKeys::free(tuples_[i]) && tuple_at_[tuples_[i].ref & INDEX] != i)
            return "tuple slot";
    for (uint32_t n = 0; n <= TUPLE_WORDS; ++n) {
        auto want = shapes[n], got = shapes_[n];
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        if (want != got) return "tuple shapes";
    }
    return "";
}

}  // namespace topicstore
