// The trie's writes: add and remove a pattern, the node records, their references' tags,
// literal edges, a node's ids and the id -> (node, text) table.
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

// The tags of node `i` (what a reference to it carries).
inline uint32_t Core::tags(uint32_t i) const {
    const Node& n = nodes_[i];
    return (n.star() != NO_NODE ? HAS_STAR : 0) | (n.hash != NO_NODE ? HAS_HASH : 0) |
           (n.nids ? HAS_IDS : 0) | (n.nids >= 2 ? HAS_MANY : 0) |
           (n.nchildren ? HAS_KIDS : 0) | (n.is_tail() ? HAS_TAIL : 0) |
           (hashes_below_[i] ? HAS_FEEDS : 0);
}

// -- writes (the caller holds the write lock and has validated everything) -------------

// Returns false when `id` is already subscribed (the caller checks that first).
inline bool Core::add(uint32_t id, const Token* tokens, size_t ntokens, const char* text,
                      size_t tlen) {
    if (find_id(id) != nullptr) return false;
    // An arena whose end this pattern's tail (at most ntokens entries) or text might pass
    // is compacted first (room() counted its garbage as free), so that nothing below
    // allocates for it once the trie has begun to change.
    if (tails_.size() + ntokens > max_tail_entries_) compact_tails(true);
    if (arena_.size() + tlen > max_text_bytes_) compact_arena();
    reserve_tuple();  // (may allocate: before the trie changes)
    ++version_;
    uint32_t cur = 0;
    bool under_hash = false;  // no tail leaf below a '#' (see tail_matches)
    for (size_t i = 0; i < ntokens; ++i) {
        const Token& t = tokens[i];
        uint32_t next;
        if (nodes_[cur].is_hash() && t.kind != 0)  // canonical form: no '#.*', no '#.#'
            throw std::logic_error("non-canonical pattern: a wildcard after '#'");
        if (t.kind == STAR) {
            next = nodes_[cur].star() & INDEX;
            if (next == NO_NODE) {
                next = new_node(cur, STAR);
                nodes_[cur].set_star(next);
                retag(cur);
            }
        } else if (t.kind == HASH) {
            under_hash = true;
            next = nodes_[cur].hash & INDEX;
            if (next == NO_NODE) {
                prepare_hash_walk();  // (may allocate: before the trie changes)
                next = new_node(cur, HASH);
                nodes_[cur].hash = next;
                ++hash_count_;
                count_hash(next, 1);
                retag(cur);
            }
        } else {
            uint32_t w = intern(t.data, t.size);
            uint32_t ref = child(cur, w);
            next = ref & INDEX;
            size_t rest = ntokens - i - 1;
            if (ref & HAS_TAIL) {
                if (same_tail(next, tokens + i + 1, rest)) {
                    cur = next;
                    break;
                }
                unfold(next);  // another pattern through the chain: make it nodes
                next = child(cur, w) & INDEX;
            } else if (next == NO_NODE) {
                bool tail = !under_hash && rest > 0;
                for (size_t j = i + 1; tail && j < ntokens; ++j) tail = tokens[j].kind == 0;
                next = new_node(cur, w);
                ++words_[w].refs;
                if (tail) nodes_[next].set_tail(new_tail(tokens + i + 1, rest));
                insert_edge(cur, w, next);
                if (++nodes_[cur].nchildren == 1) retag(cur);
                if (tail) {
                    cur = next;
                    break;
                }
            }
        }
        cur = next;
    }
    Node& leaf = nodes_[cur];
    uint32_t ti = NO_TEXT;
    if (!is_path_text(tokens, ntokens, text, tlen)) {
        ti = leaf.texts;
        while (ti != NO_TEXT && !(texts_[ti].len == tlen &&
                                  std::memcmp(arena_.data() + texts_[ti].off, text, tlen) == 0))
            ti = texts_[ti].next;
        if (ti == NO_TEXT) {
            ti = new_text(text, tlen);
            texts_[ti].next = leaf.texts;
            leaf.texts = ti;
        }
        ++texts_[ti].refs;
    }
    insert_id(id, cur, ti, leaf.nids);
    push_id(leaf, id);  // may grow idvecs_, not nodes_: `leaf` stays valid
    drop_cached(cur);
    if (leaf.nids <= 2) retag(cur);  // HAS_IDS / HAS_MANY and Node::ids changed
    count_pattern(cur, 1);
    settle_tuples();
    return true;
}

// Returns false when `id` is not subscribed.
inline bool Core::remove(uint32_t id) {
    IdSlot* s = find_id(id);
    if (s == nullptr) return false;
    ++version_;
    uint32_t cur = s->node;
    uint32_t pos = s->pos;
    uint32_t ti = s->text;
    erase_id(id);
    Node& leaf = nodes_[cur];
    uint32_t last = pop_id(leaf, pos);
    if (last != id) find_id(last)->pos = pos;
    drop_cached(cur);
    if (ti != NO_TEXT && --texts_[ti].refs == 0) drop_text(leaf, ti);
    if (leaf.nids <= 1) retag(cur);  // HAS_IDS / HAS_MANY and Node::ids changed
    count_pattern(cur, -1);
    // Prune nodes left empty, bottom-up (the root stays).
    while (cur != 0 && nodes_[cur].empty()) {
        Node& n = nodes_[cur];
        uint32_t parent = n.parent;
        Node& p = nodes_[parent];
        if (n.label == STAR) {
            p.set_star(NO_NODE);
            retag(parent);
        } else if (n.label == HASH) {
            p.hash = NO_NODE;
            --hash_count_;
            count_hash(cur, -1);
            retag(parent);
        } else {
            if (n.is_tail()) drop_tail(cur);
            erase_edge(parent, n.label);
            release_word(n.label);
            if (--p.nchildren == 0) retag(parent);
        }
        free_node(cur);
        cur = parent;
    }
    settle_tuples();
    return true;
}

// Node `i`'s tags or ids field changed: rewrite the one reference to it (in its parent),
// and, in a literal edge, the ids mirror (see Edge).
inline void Core::retag(uint32_t i) {
    if (i == 0) {  // nobody's child: its reference is kept for the walks
        root_ref_ = tags(0);
        sync_tuple(0);  // (a pattern of no words: the index cannot hold it)
        return;
    }
    const Node& n = nodes_[i];
    uint32_t ref = i | tags(i);
    if (n.label == STAR) {
        nodes_[n.parent].set_star(ref);
    } else if (n.label == HASH) {
        nodes_[n.parent].hash = ref;
    } else {
        Edge& e = edges_[edge_at(n.parent, n.label)];
        e.child = ref;
        e.ids = n.ids;
    }
    sync_tuple(i);
}

inline uint32_t Core::new_node(uint32_t parent, uint32_t label) {
    uint32_t i;
    if (!free_nodes_.empty()) {
        i = free_nodes_.back();
        free_nodes_.pop_back();
    } else {
        // room() said it fits: a write that gets here broke that promise.
        if (nodes_.size() >= max_nodes_) throw std::length_error("too many trie nodes");
        i = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
        hashes_below_.push_back(0);
        tuple_at_.push_back(NO_TUPLE);
    }
    Node& n = nodes_[i];
    n.parent = parent;
    n.label = label;  // STAR / HASH / a word: live from here
    ++node_count_;
    return i;
}

// The tokens after the last '#' of the pattern ending at `leaf` (all of them without
// one). O(depth).
inline uint32_t Core::tail_length(uint32_t leaf) const {
    uint32_t n = nodes_[leaf].is_tail() ? tails_[nodes_[leaf].tail_at()] : 0;
    for (uint32_t h = leaf; h != 0 && !nodes_[h].is_hash(); h = nodes_[h].parent) ++n;
    return n;
}

// f(a) for every node above node `i`, its parent first, the root last. O(depth).
template <class F>
inline void Core::each_above(uint32_t i, F&& f) const {
    for (uint32_t a = nodes_[i].parent;; a = nodes_[a].parent) {
        f(a);
        if (a == 0) break;
    }
}

// A pattern ending at `leaf` comes (delta +1) or goes (-1): its tail (the tokens after
// its last '#', or all of them) is counted for max_tail(). O(depth).
inline void Core::count_pattern(uint32_t leaf, int delta) {
    const uint32_t tail = tail_length(leaf);
    if (tail_counts_.size() <= tail) tail_counts_.resize(tail + 1, 0);
    tail_counts_[tail] += static_cast<uint32_t>(delta);
    if (tail > max_tail_ && tail_counts_[tail]) max_tail_ = tail;
    while (max_tail_ > 0 && tail_counts_[max_tail_] == 0) --max_tail_;
}

// '#' node `h` comes (delta +1) or goes (-1): every node above it (root included) has
// one more or one less below (hashes_below_), and HAS_FEEDS when it has any. O(depth).
inline void Core::count_hash(uint32_t h, int delta) {
    each_above(h, [&](uint32_t a) {
        uint32_t before = hashes_below_[a];
        hashes_below_[a] = before + static_cast<uint32_t>(delta);
        if ((before == 0) != (hashes_below_[a] == 0)) retag(a);
    });
}

inline void Core::free_node(uint32_t i) {
    nodes_[i] = Node();  // empty: no ids (pop_id released them), no kept result
    free_nodes_.push_back(i);
    --node_count_;
}

// -- a node's ids ------------------------------------------------------------------------

inline void Core::push_id(Node& n, uint32_t id) {
    if (n.nids == 0) {
        n.ids = id;
    } else if (n.nids == 1) {
        uint32_t v;
        if (!free_idvecs_.empty()) {
            v = free_idvecs_.back();
            free_idvecs_.pop_back();
        } else {
            v = static_cast<uint32_t>(idvecs_.size());
            idvecs_.emplace_back();
        }
        idvecs_[v].push_back(n.ids);
        idvecs_[v].push_back(id);
        n.ids = v;
    } else {
        idvecs_[n.ids].push_back(id);
    }
    ++n.nids;
}

// Remove the id at `pos` by moving the last one there; returns that last id. Two ids
// down to one go back inline (the pool entry is freed).
inline uint32_t Core::pop_id(Node& n, uint32_t pos) {
    if (n.nids == 1) {
        uint32_t last = n.ids;
        n.ids = 0;
        n.nids = 0;
        return last;
    }
    IdVec& v = idvecs_[n.ids];
    uint32_t last = v.back();
    v[pos] = last;
    v.pop_back();
    if (--n.nids == 1) {
        uint32_t only = v[0];
        v.release();
        free_idvecs_.push_back(n.ids);
        n.ids = only;
    }
    return last;
}

// -- edges -------------------------------------------------------------------------------

// The slot of edge (parent, word), or the free slot where its probe ends.
inline size_t Core::edge_at(uint32_t parent, uint32_t word) const {
    return static_cast<size_t>(probe(edges_.data(), edges_.mask(), parent, word) - edges_.data());
}

// The edge (parent, word) to node `c` (its reference and ids mirror taken from it).
inline void Core::insert_edge(uint32_t parent, uint32_t word, uint32_t c) {
    if (edges_.full()) edges_.grow();
    edges_.place(Edge{parent, word, c | tags(c), nodes_[c].ids});
}

inline void Core::erase_edge(uint32_t parent, uint32_t word) { edges_.erase(edge_at(parent, word)); }

// -- ids -----------------------------------------------------------------------------------

inline const IdSlot* Core::find_id(uint32_t id) const {
    const IdSlot& s =
        idslots_[idslots_.find(IdKeys::bucket(id), [id](const IdSlot& s) { return s.id == id; })];
    return IdKeys::free(s) ? nullptr : &s;
}

inline IdSlot* Core::find_id(uint32_t id) {
    return const_cast<IdSlot*>(static_cast<const Core*>(this)->find_id(id));
}

inline void Core::insert_id(uint32_t id, uint32_t node, uint32_t text, uint32_t pos) {
    if (idslots_.full()) idslots_.grow();
    idslots_.place(IdSlot{id, node, text, pos});
}

// `id` is in the table.
inline void Core::erase_id(uint32_t id) {
    idslots_.erase(idslots_.find(IdKeys::bucket(id), [id](const IdSlot& s) { return s.id == id; }));
}

}  // namespace topicstore
