// The `native` engine's storage and walk: the algorithm of matcher/trie.py in C++.
//
// Nodes live in one vector and refer to each other by 32-bit references: the node's index
// (0 is the root, so 0 also means "no such node": the root is nobody's child) tagged with
// whether that node has a '*' child, a '#' child and ids. The walk reads a node only when
// a tag says there is something to read there; the common step is one probe of the edge
// table, and a miss in cache there is what a step costs (profiled). Words
// are interned to 32-bit ids; literal edges are one open-addressing table keyed by
// (parent, word id), so a step of the walk is a multiply, a mask and a compare of integers.
// An edge also carries its child's ids field, so a walk ending on a literal child reads
// its ids (or their vector's index) from the edge it probed, not from the node.
// The id -> (node, pattern text) table is native too: nothing per subscription is a Python
// object.
//
// Memory: at a million subscriptions the trie had ~3 million nodes, most of them single-child
// chains below the third word. A chain of literal words that ends a pattern and has no '#'
// above it is one "tail leaf": the node of its first word, holding the rest of the words
// (tails_) and the ids; the walk compares the topic's remaining words with them at once.
// A node is 32 bytes (two a cache line): what only some nodes need lives beside them (ids
// past the first in idvecs_, the results kept per end node in a bounded table, cached_),
// and the '*' field is the stamp in a '#' node and the tail in a tail leaf (neither ever
// has a '*' child).
//
// Short patterns without '#' (the scaled bench's, most routing keys) are also held in a
// tuple index (Core::tuple_walk): one hash table keyed by a pattern's length, '*' positions
// and words, kept beside the trie as the edges are (every end node's entry follows its
// reference and ids). It is kept only while it holds every pattern (no '#' pattern, none
// longer than five words; see settle_tuples); then a topic of up to five words is a few
// independent probes, one per '*' shape, instead of five dependent levels (lengths with
// many shapes are walked). It costs a 32-byte entry per end node (the table at most 3/4
// full) and 4 bytes per node: 74 bytes per subscription at a million (python -m
// bench.memory) against 59 without it.
//
// Long topics against '#' patterns (the adversarial case): while more words remain than
// any pattern has after its last '#' (max_tail()), only nodes with a '#' below them
// (HAS_FEEDS) and not yet "spent" (every '#' below already active) can change the answer,
// so the walk carries only those (see hash_walk); matcher/trie.py prunes the same way.
// Each node counts the '#' nodes below it, and the walk counts those it activates at their
// ancestors, so "spent" is one comparison (see spent()).
//
// Thread safety is the caller's (matcher/_native.pyx): every method runs start to end
// holding the GIL and calls no Python code, so no reader ever sees a half-applied write.
// The only Python calls are Py_INCREF/Py_XDECREF of the cached per-node results (Ids of
// _native.pyx: no Python references, so their deallocation runs no Python code).
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace topicstore {

constexpr uint32_t NO_NODE = 0;             // in star/hash/child fields (the root is index 0)
constexpr uint32_t HAS_STAR = 1u << 31;     // reference tags: what the referenced node has
constexpr uint32_t HAS_HASH = 1u << 30;
constexpr uint32_t HAS_IDS = 1u << 29;
constexpr uint32_t HAS_KIDS = 1u << 28;     // literal children
constexpr uint32_t HAS_TAIL = 1u << 27;     // a tail leaf (see Node)
constexpr uint32_t HAS_FEEDS = 1u << 26;    // a '#' node below (Core::hashes_below_)
constexpr uint32_t HAS_MANY = 1u << 25;     // two or more ids (Node::ids is an IdVec's index)
constexpr uint32_t INDEX = HAS_MANY - 1;    // the node index part of a reference
constexpr uint32_t HAS_EDGES = HAS_STAR | HAS_HASH | HAS_KIDS;
constexpr uint32_t MAX_NODES = INDEX;       // nodes a trie can hold, root included
constexpr uint32_t TAIL_AT = HAS_TAIL - 1;  // a tail leaf's offset in Core::tails_ (see Node)
constexpr uint32_t MAX_TAIL_ENTRIES = TAIL_AT;  // tails_ entries: offsets below TAIL_AT
constexpr uint32_t MAX_TEXT_BYTES = UINT32_MAX;  // the text arena (32-bit Text offsets)
enum Room { ROOM_NODES = 1, ROOM_TAILS = 2, ROOM_TEXT = 3 };  // Core::room's answers
constexpr uint32_t EMPTY_SLOT = 0xFFFFFFFFu;  // id table: free slot
constexpr uint32_t UNKNOWN_WORD = 0xFFFFFFFFu;  // a topic word no pattern names
constexpr uint32_t STAR = 0xFFFFFFFEu;        // token / edge label of '*'
constexpr uint32_t HASH = 0xFFFFFFFDu;        // token / edge label of '#'
constexpr uint32_t FREE = 0xFFFFFFFCu;        // label of a free node record

inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

// Topic words are short: these helpers stay inline, byte loops below 8 bytes (a library
// memcpy/memcmp call per word showed up in profiles).
inline uint64_t pack_short(const char* p, size_t n) {  // n < 8: the bytes, little-endian
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    return v;
}

inline uint64_t hash_seed(size_t n) {
    return 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(n) * 0xbf58476d1ce4e5b9ULL);
}

inline uint64_t hash_bytes(const char* p, size_t n) {
    uint64_t h = hash_seed(n);
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = (h ^ v) * 0x94d049bb133111ebULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    return mix64(h ^ pack_short(p, n));
}

// A word of fewer than 8 bytes as one number that equals another word's only if the words
// are equal: its packed bytes, and its length + 1 in the top byte (never 0).
inline uint64_t short_key_of(uint64_t packed, size_t n) {
    return packed | (static_cast<uint64_t>(n + 1) << 56);
}

// short_key_of the word, or 0 when it has 8 bytes or more.
inline uint64_t short_key(const char* p, size_t n) {
    return n < 8 ? short_key_of(pack_short(p, n), n) : 0;
}

inline bool same_bytes(const char* a, const char* b, size_t n) {
    if (n > 16) return std::memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

// One token of a pattern: a literal word (bytes) or STAR / HASH.
struct Token {
    const char* data;
    uint32_t size;
    uint32_t kind;  // 0: literal, STAR, HASH
};

// A topic word: UTF-8 bytes.
struct Word {
    const char* data;
    uint32_t size;
};

// A distinct pattern text of a node that is not the node's path text (the labels from the
// root joined by '.', wildcards as '*' and '#'; most patterns are written so, and then
// store no text at all: the id's text is NO_TEXT). Its bytes are in the core's one text
// arena (no allocation per subscription); `next` is the next text of the same node.
constexpr uint32_t NO_TEXT = 0xFFFFFFFFu;
struct Text {
    uint32_t off;
    uint32_t len;
    uint32_t refs;  // ids using it; 0: a free record (then `next` links the free list)
    uint32_t next;
};

// The ids of a node holding two or more: two inline, more in a heap array. Trivially
// copyable so the pool (Core::idvecs_) can grow by memmove; the owner frees it (release()).
class IdVec {
   public:
    uint32_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    const uint32_t* data() const { return cap_ <= INLINE ? inline_ : heap_; }
    uint32_t* data() { return cap_ <= INLINE ? inline_ : heap_; }
    uint32_t& operator[](uint32_t i) { return data()[i]; }
    uint32_t operator[](uint32_t i) const { return data()[i]; }
    uint32_t back() const { return data()[size_ - 1]; }
    void push_back(uint32_t id) {
        if (size_ == cap_) reserve(cap_ * 2);
        data()[size_++] = id;
    }
    void pop_back() {
        --size_;
        if (cap_ > INLINE && size_ * 4 <= cap_) reserve(size_ <= INLINE ? INLINE : cap_ / 2);
    }
    void release() {
        if (cap_ > INLINE) std::free(heap_);
        size_ = 0;
        cap_ = INLINE;
    }

   private:
    static constexpr uint32_t INLINE = 2;
    uint32_t size_ = 0;
    uint32_t cap_ = INLINE;
    union {
        uint32_t inline_[INLINE];
        uint32_t* heap_;
    };

    void reserve(uint32_t cap) {
        uint32_t* old = data();
        bool was_heap = cap_ > INLINE;
        if (cap <= INLINE) {
            uint32_t tmp[INLINE];
            std::memcpy(tmp, old, size_ * sizeof(uint32_t));
            if (was_heap) std::free(old);
            std::memcpy(inline_, tmp, size_ * sizeof(uint32_t));
            cap_ = INLINE;
            return;
        }
        uint32_t* fresh = static_cast<uint32_t*>(std::malloc(cap * sizeof(uint32_t)));
        if (fresh == nullptr) throw std::bad_alloc();
        std::memcpy(fresh, old, size_ * sizeof(uint32_t));
        if (was_heap) std::free(old);
        heap_ = fresh;
        cap_ = cap;
    }
};

// 32 bytes, all the walk reads of a node. One id is held inline (most end nodes hold one,
// and a match then reads nothing else); two or more live in the pool Core::idvecs_.
struct Node {
    // Tagged reference to the '*' child (read it through star_ref()). A '#' node never has
    // one (canonical form: '#.*' is written '*.#'), so there the field is the hash walk's
    // stamp: the walk that last made this node active. A tail leaf has no child at all:
    // there it is HAS_TAIL | the offset of its words in Core::tails_.
    uint32_t star = NO_NODE;
    uint32_t hash = NO_NODE;  // tagged reference to the '#' child
    uint32_t parent = 0;
    uint32_t label = FREE;    // the edge from the parent: a word id, STAR or HASH; FREE: unused
    uint32_t nchildren = 0;   // literal edges out
    uint32_t texts = NO_TEXT; // first distinct text of the ids that is not the path's (see Text)
    uint32_t nids = 0;        // subscriptions ending here
    uint32_t ids = 0;         // nids == 1: the id; nids >= 2: its IdVec in Core::idvecs_

    bool live() const { return label != FREE; }
    bool is_hash() const { return label == HASH; }
    bool is_tail() const { return !is_hash() && (star & HAS_TAIL); }
    uint32_t star_ref() const { return is_hash() || (star & HAS_TAIL) ? NO_NODE : star; }
    uint32_t tail_at() const { return star & TAIL_AT; }  // a tail leaf's words' offset
    bool empty() const {
        return nids == 0 && nchildren == 0 && star_ref() == NO_NODE && hash == NO_NODE;
    }
};
static_assert(sizeof(Node) == 32, "two nodes a cache line");

// A literal edge carries its child's `ids` field too (kept equal by Core::retag): a walk
// that ends on a literal child reads its ids, or the index of its id vector, from the
// edge it probed, not from the node. On a trie larger than the cache the end node's line
// was a second dependent miss after the edge's (profiled: the scaled bench, 100,000
// patterns, most topics ending on two such nodes).
struct Edge {
    uint32_t parent;
    uint32_t word;
    uint32_t child;  // tagged reference; NO_NODE: free slot
    uint32_t ids;    // the child's Node::ids
};
static_assert(sizeof(Edge) == 16, "four edges a cache line");

struct IdSlot {
    uint32_t id;
    uint32_t node;  // EMPTY_SLOT: free slot
    uint32_t text;  // index into the node's texts
    uint32_t pos;   // index into the node's ids
};

struct WordEntry {
    std::string text;
    uint64_t hash = 0;
    uint32_t refs = 0;  // literal edges labelled with this word; 0: the id is free
};

// A result of several end nodes, kept for the next walk that ends on the same nodes.
constexpr uint32_t COMBO_NODES = 8;    // end nodes at most (with ids) in a kept result
constexpr uint32_t COMBO_IDS = 32;     // ids at most in a kept result
// Two-way: a result goes to the first slot of its pair and the pair's previous first moves
// to the second (direct-mapped, two colliding end sets evicted each other on every match:
// ~10% of the throughput workload's matches rebuilt their result, callgrind).
constexpr size_t COMBO_SLOTS = 4096;

struct ComboSlot {
    uint64_t version = 0;  // the structure's version it was built against (0: empty)
    uint32_t n = 0;
    uint32_t nodes[COMBO_NODES];
    PyObject* result = nullptr;
};

// An allocator whose resize() leaves new entries uninitialized: the walks' scratch lists
// are grown to room for a level and then written (zero-filling them first showed up in
// profiles of the '#' walk).
template <class T>
struct NoInit : std::allocator<T> {
    template <class U>
    struct rebind {
        using other = NoInit<U>;
    };
    NoInit() = default;
    template <class U>
    NoInit(const NoInit<U>&) noexcept {}
    template <class U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... A>
    void construct(U* p, A&&... a) {
        ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
    }
};
using Scratch = std::vector<uint32_t, NoInit<uint32_t>>;

// What a walk ends on: `size` tagged node references from `data` and, for those holding
// ids (HAS_IDS), their Node::ids in `ids` (the walk's scratch; read them through
// Core::end_ids / end_count).
struct Ends {
    const uint32_t* data;
    const uint32_t* ids;
    size_t size;
};

// The tuple index (see Core::tuple_walk): one entry per end node whose pattern has at
// most TUPLE_WORDS words and no '#', keyed by its length, its '*' positions and its words
// (STAR where the pattern has '*'); it mirrors the end node's reference and ids field as
// the node's literal edge does. 32 bytes, two a cache line.
constexpr uint32_t TUPLE_WORDS = 5;
struct Tuple {
    uint32_t shape;  // length << 16 | the mask of '*' positions; 0: a free slot
    uint32_t words[TUPLE_WORDS];
    uint32_t ref;  // the end node's tagged reference
    uint32_t ids;  // its Node::ids
};
static_assert(sizeof(Tuple) == 32, "two tuples a cache line");
constexpr uint32_t NO_TUPLE = 0xFFFFFFFFu;   // Core::tuple_at_: the node has no entry
constexpr uint32_t UNTUPLED = 0xFFFFFFFEu;   // ... it ends patterns the index cannot hold

struct WordSlot {
    uint32_t hash32;
    uint32_t id_plus1;  // 0: free slot
    uint64_t key;       // short_key of the word: a short word is found without reading its text
};

// A result of one end node (the Ids of its ids), kept for the next match ending there
// alone; dropped by a write to the node. Direct-mapped by node: bounded memory however
// many nodes are matched over time (one frozenset per end node was unbounded).
constexpr size_t CACHED_SLOTS = 1u << 16;

struct CachedSlot {
    uint32_t node_plus1 = 0;  // 0: empty
    PyObject* result = nullptr;
};

// Whether match() consults and fills the kept results (cached_, combos_). They pay when
// most matches find theirs: a hit returns without building anything. When topics are many
// (device ids, the scaled bench's 63,000 distinct topics over 100,000 patterns) most
// lookups miss, and a miss costs a cache line of the table, and the put evicts an older
// result whose object is long out of cache (its reference count is written): measured
// there, matching with the tables cost 345 ns a match against 300 ns without them (41%
// of lookups hit), while the throughput bench's 1,000 topics hit 99% and save 30 ns. So
// after a window of WINDOW lookups in which fewer than 3 in 4 hit, the tables are passed
// by for the next BYPASS matches, then tried again for a window. Results stay exact
// either way: a bypassed match builds its result, and writes drop kept results as before.
class ResultGate {
   public:
    static constexpr uint32_t WINDOW = 4096;
    static constexpr uint32_t BYPASS = 65536;
    // Whether the tables are being passed by (open() says so and counts down).
    bool bypassing() const { return skip_ != 0; }
    // Whether this match should use the tables (a match that should not counts down).
    bool open() {
        if (skip_ == 0) return true;
        --skip_;
        return false;
    }
    // A match that used them found its result kept (hit) or not (counted only for results
    // small enough to be kept: a big one is never found, and says nothing about reuse).
    void looked(bool hit) {
        hits_ += hit;
        if (++looks_ < WINDOW) return;
        if (hits_ * 4 < looks_ * 3) skip_ = BYPASS;
        looks_ = hits_ = 0;
    }

   private:
    uint32_t looks_ = 0, hits_ = 0, skip_ = 0;
};

class Core {
   public:
    Core() {
        nodes_.emplace_back();
        nodes_[0].label = 0;  // the root: live, nobody's child
        hashes_below_.push_back(0);
        tuple_at_.push_back(NO_TUPLE);
        edges_.assign(16, Edge{0, 0, NO_NODE, 0});
        idslots_.assign(16, IdSlot{0, EMPTY_SLOT, 0, 0});
        wordslots_.assign(16, WordSlot{0, 0, 0});
        tuples_.assign(16, Tuple{});
    }
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;
    ~Core() {
        for (ComboSlot& c : combos_) Py_XDECREF(c.result);
        for (CachedSlot& c : cached_) Py_XDECREF(c.result);
        for (IdVec& v : idvecs_) v.release();
    }

    // -- reads -----------------------------------------------------------------------------

    uint32_t size() const { return id_count_; }
    uint32_t node_count() const { return node_count_; }
    uint32_t hash_count() const { return hash_count_; }
    // Whether a walk over `n` words is a lookup in the tuple index (see tuple_walk). The
    // count is asked too: an add() that threw (out of memory) after its end node counted
    // itself UNTUPLED never reached settle_tuples(), and the walk must answer then.
    bool answers_by_tuples(size_t n) const {
        return tuples_on_ && untupled_ == 0 && n <= TUPLE_WORDS &&
               shapes_[n].size() <= MAX_SHAPES;
    }
    // The most tokens any pattern has after its last '#' (all of them without one): a node
    // with no '#' below it is at most that many words from its ids.
    uint32_t max_tail() const { return max_tail_; }
    uint64_t version() const { return version_; }
    const Node& node(uint32_t i) const { return nodes_[i]; }

    // -- capacity ----------------------------------------------------------------------------

    // Whether adding `items` patterns of `tokens` tokens and `text_bytes` text bytes in all
    // surely fits the structure's fixed capacities: ROOM_NODES, ROOM_TAILS or ROOM_TEXT for
    // the first that it might not, or 0. A writer asks before add() (which throws midway
    // past a capacity). The bounds are safe: each token makes at most one node, at once or
    // when a tail holding it unfolds; besides, each item may unfold one tail leaf it finds
    // (max_tail() words at most, and no more than the tails hold); a new tail takes at most
    // its pattern's tokens entries; a stored text at most its bytes. Space left by removed
    // tails and texts counts as free once it is an eighth of the capacity (add() compacts
    // when a write needs it: each such compaction frees that much, so writes near a full
    // arena do not each copy it). For one item the bounds are tight to a few hundred
    // nodes; for a batch, counting every token as a node is far above what a trie of tails
    // needs, so a batch that fails the bound is indexed checking item by item (and undone
    // if one fails: see _native.pyx). O(1).
    int room(size_t items, size_t tokens, size_t text_bytes) const {
        size_t live_tails = tails_.size() - tail_garbage_;
        size_t unfolded = std::min(live_tails, items * static_cast<size_t>(max_tail_));
        if (node_count_ + tokens + unfolded > max_nodes_) return ROOM_NODES;
        size_t tails = tail_garbage_ >= max_tail_entries_ / 8 ? live_tails : tails_.size();
        if (tails + tokens > max_tail_entries_) return ROOM_TAILS;
        size_t text = garbage_ >= max_text_bytes_ / 8 ? arena_.size() - garbage_ : arena_.size();
        if (text + text_bytes > max_text_bytes_) return ROOM_TEXT;
        return 0;
    }
    // (used, capacity) of each: trie nodes (root included), tail entries, text bytes.
    void usage(size_t out[6]) const {
        out[0] = node_count_;
        out[1] = max_nodes_;
        out[2] = tails_.size() - tail_garbage_;
        out[3] = max_tail_entries_;
        out[4] = arena_.size() - garbage_;
        out[5] = max_text_bytes_;
    }
    // Lower the capacities (never above the structure's own): for tests, which reach a
    // capacity with thousands of patterns, not tens of millions.
    void lower_capacity(size_t nodes, size_t tail_entries, size_t text_bytes) {
        max_nodes_ = std::min<size_t>(nodes, MAX_NODES);
        max_tail_entries_ = std::min<size_t>(tail_entries, MAX_TAIL_ENTRIES);
        max_text_bytes_ = std::min<size_t>(text_bytes, MAX_TEXT_BYTES);
    }

    // The ids of node `i` (nodes_[i].nids of them). Valid until the next write.
    const uint32_t* ids_of(uint32_t i) const {
        const Node& n = nodes_[i];
        return n.nids <= 1 ? &n.ids : idvecs_[n.ids].data();
    }
    uint32_t id_count(uint32_t i) const { return nodes_[i].nids; }

    // The ids of end `k` of a walk's `ends` (it has HAS_IDS): end_count(ends, k) of them from
    // end_ids(ends, k). Reads no node: one id is in `ends` itself, more in the id vector
    // whose index is there. Valid until the next walk or write.
    uint32_t end_count(const Ends& ends, size_t k) const {
        return ends.data[k] & HAS_MANY ? idvecs_[ends.ids[k]].size() : 1;
    }
    const uint32_t* end_ids(const Ends& ends, size_t k) const {
        return ends.data[k] & HAS_MANY ? idvecs_[ends.ids[k]].data() : ends.ids + k;
    }

    ResultGate& result_gate() { return gate_; }

    // The kept result (Ids) of node `i`'s ids (borrowed), or nullptr.
    PyObject* cached(uint32_t i) const {
        if (cached_.empty()) return nullptr;
        const CachedSlot& c = cached_[cached_bucket(i)];
        return c.node_plus1 == i + 1 ? c.result : nullptr;
    }

    // Keep `result` (a new reference is taken) as node `i`'s; the caller checked that no
    // write ran since it read the ids (the version did not move).
    void keep_cached(uint32_t i, PyObject* result) {
        if (cached_.empty()) cached_.resize(CACHED_SLOTS);
        CachedSlot& c = cached_[cached_bucket(i)];
        PyObject* old = c.result;
        Py_INCREF(result);
        c.result = result;
        c.node_plus1 = i + 1;
        Py_XDECREF(old);  // an Ids: frees memory, runs no Python code
    }

    bool has(uint32_t id) const { return find_id(id) != nullptr; }

    // The pattern text of `id` (its bytes, `*size` of them), or nullptr. Valid until the
    // next write or the next call. O(depth) when it is the path's text.
    const char* pattern_of(uint32_t id, uint32_t* size) const {
        const IdSlot* s = find_id(id);
        if (s == nullptr) return nullptr;
        return text_of(*s, size);
    }

    // Every (id, text bytes, size), in table order.
    template <class F>
    void for_each_id(F&& f) const {
        uint32_t size;
        for (const IdSlot& s : idslots_)
            if (s.node != EMPTY_SLOT) {
                const char* text = text_of(s, &size);
                f(s.id, text, size);
            }
    }

    uint32_t word_id(const char* p, uint32_t n) const {
        return n < 8 ? short_word_id(pack_short(p, n), n) : long_word_id(p, n);
    }

    // The ids (word_id) of `n` words already split (UTF-8 `data[k]` of `sizes[k]` bytes) into
    // `out`, whose size is room as split_words' is; returns n.
    size_t word_ids(const char* const* data, const size_t* sizes, size_t n,
                    std::vector<uint32_t>& out) const {
        if (out.size() < n) out.resize(n);
        for (size_t k = 0; k < n; ++k) out[k] = word_id(data[k], static_cast<uint32_t>(sizes[k]));
        return n;
    }

    // The word ids of `data[:n]` split on `sep` (every separator splits, empty words
    // included) into `out`, and their number. `out`'s size is room, not that number: it
    // only grows (to n + 1, the most words n bytes hold), so the loop writes through a
    // pointer. One byte loop both finds the separators and packs each short word (as
    // pack_short): topic words are a few bytes, not worth a library call or a second pass
    // each (push_back, not inlined, and the packing loop were a tenth of a match's
    // instructions: callgrind, the scaled bench).
    size_t split_words(const char* data, size_t n, char sep, std::vector<uint32_t>& out) const {
        if (out.size() < n + 1) out.resize(n + 1);
        uint32_t* const ids = out.data();
        size_t count = 0, start = 0;
        uint64_t packed = 0;
        for (size_t i = 0; i < n; ++i) {
            const unsigned char c = static_cast<unsigned char>(data[i]);
            if (c == static_cast<unsigned char>(sep)) {
                ids[count++] = word_at(data + start, i - start, packed);
                start = i + 1;
                packed = 0;
            } else {
                // Bytes past the 8th wrap around: such a word is looked up by its text.
                packed |= static_cast<uint64_t>(c) << (8 * ((i - start) & 7));
            }
        }
        ids[count++] = word_at(data + start, n - start, packed);
        return count;
    }

    uint32_t child(uint32_t parent, uint32_t word) const {
        return probe(edges_.data(), edges_.size() - 1, parent, word)->child;
    }

    // One step of the walk from ``ref`` over word ``w``: its literal child and its '*'
    // child, kept when they have what the rest of the walk needs (``keep``'s flags). Only
    // for nodes below a '#' (static_step): those never lead to a tail leaf.
    inline void step(uint32_t ref, uint32_t w, uint32_t keep, Scratch& next) const {
        if ((ref & HAS_KIDS) && w != UNKNOWN_WORD) {
            uint32_t c = child(ref & INDEX, w);
            if (c & keep) next.push_back(c);
        }
        if (ref & HAS_STAR) {
            uint32_t c = nodes_[ref & INDEX].star;
            if (c & keep) next.push_back(c);
        }
    }

    // child() on a table the caller read once (the walk's loops push into vectors, so the
    // compiler cannot keep edges_'s pointer and size in registers across them by itself).
    // The edge's slot, or a free slot (child NO_NODE) when there is no such edge.
    const Edge* probe(const Edge* edges, size_t mask, uint32_t parent, uint32_t word) const {
        for (size_t i = edge_bucket(parent, word) & mask;; i = (i + 1) & mask) {
            const Edge* e = edges + i;
            if (e->child == NO_NODE || (e->parent == parent && e->word == word)) return e;
        }
    }

    // The tags of node `i` (what a reference to it carries).
    uint32_t tags(uint32_t i) const {
        const Node& n = nodes_[i];
        return (n.star_ref() != NO_NODE ? HAS_STAR : 0) | (n.hash != NO_NODE ? HAS_HASH : 0) |
               (n.nids ? HAS_IDS : 0) | (n.nids >= 2 ? HAS_MANY : 0) |
               (n.nchildren ? HAS_KIDS : 0) | (n.is_tail() ? HAS_TAIL : 0) |
               (hashes_below_[i] ? HAS_FEEDS : 0);
    }

    // Tagged references to the nodes reachable after consuming `words` (ids from word_id):
    // the walk of matcher/trie.py. They are scratch, valid until the next walk.
    // `level_sizes`, when not null, receives the nodes live at each level (the bound the
    // tests check: at most node_count() each).
    Ends walk(const uint32_t* words, size_t n, std::vector<uint32_t>* level_sizes) {
        if (level_sizes == nullptr && answers_by_tuples(n)) return tuple_walk(words, n);
        if (hash_count_ == 0 && level_sizes == nullptr) return plain_walk(words, n);
        return hash_walk(words, n, level_sizes);
    }

    // The kept result (Ids) for the sorted end nodes `nodes[:n]` (borrowed), or nullptr. Any
    // write makes every kept result stale (the version moves on), so none is ever served
    // for a structure it was not built from.
    PyObject* combo_get(const uint32_t* nodes, uint32_t n) const {
        if (combos_.empty()) return nullptr;
        const ComboSlot* pair = &combos_[combo_bucket(nodes, n)];
        for (int k = 0; k < 2; ++k) {
            const ComboSlot& c = pair[k];
            if (c.version == version_ && c.n == n && same_nodes(c.nodes, nodes, n)) return c.result;
        }
        return nullptr;
    }

    // A loop, not memcmp: at most COMBO_NODES entries (the library call cost more, callgrind).
    static bool same_nodes(const uint32_t* a, const uint32_t* b, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i)
            if (a[i] != b[i]) return false;
        return true;
    }

    // Keep `result` (a new reference is taken) for `nodes[:n]` if no write happened since
    // `version` was read (the walk it came from is still the structure's).
    void combo_put(const uint32_t* nodes, uint32_t n, uint64_t version, PyObject* result) {
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

    // -- writes (the caller holds the write lock and has validated everything) -------------

    // Returns false when `id` is already subscribed (the caller checks that first).
    bool add(uint32_t id, const Token* tokens, size_t ntokens, const char* text, size_t tlen) {
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
            if (nodes_[cur].is_hash() && t.kind != 0)  // its '*' field is the stamp
                throw std::logic_error("non-canonical pattern: a wildcard after '#'");
            if (t.kind == STAR) {
                next = nodes_[cur].star & INDEX;
                if (next == NO_NODE) {
                    next = new_node(cur, STAR);
                    nodes_[cur].star = next;
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
                    if (tail) nodes_[next].star = HAS_TAIL | new_tail(tokens + i + 1, rest);
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
    bool remove(uint32_t id) {
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
                p.star = NO_NODE;
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

    // An empty string when every invariant holds, else what is broken.
    std::string check() const {
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
            if (n.is_hash() && n.star > epoch_) return "stamp from a future walk";
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
            uint32_t star = n.star_ref();
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
                if (n.label == STAR ? (p.star_ref() & INDEX) != i
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
        if (ids != id_count_) return "id count";
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
        if (edges != edge_count_) return "edge count";
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
        if (words != word_count_) return "word count";
        // The tail counts, recomputed from each id's end node (count_pattern), and the '#'
        // nodes below each node, from each '#' node (count_hash).
        std::vector<uint32_t> tails(tail_counts_.size(), 0);
        for (const IdSlot& slot : idslots_) {
            if (slot.node == EMPTY_SLOT) continue;
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

   private:
    std::vector<Text> texts_;
    uint32_t free_text_ = NO_TEXT;
    std::string arena_;   // every live text's bytes, and garbage_ bytes of removed ones
    mutable std::string text_scratch_;  // pattern_of's answer when it is a path text
    size_t garbage_ = 0;

    uint32_t new_text(const char* text, size_t tlen) {
        // room() said it fits and add() compacted: a write that gets here broke that.
        if (arena_.size() + tlen > max_text_bytes_) throw std::length_error("text arena full");
        uint32_t ti = free_text_;
        if (ti != NO_TEXT) {
            free_text_ = texts_[ti].next;
        } else {
            ti = static_cast<uint32_t>(texts_.size());
            texts_.push_back(Text{0, 0, 0, NO_TEXT});
        }
        texts_[ti] = Text{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(tlen), 0,
                          NO_TEXT};
        arena_.append(text, tlen);
        return ti;
    }

    // Whether `text` is the path text of `tokens` (see Text): then nothing is stored.
    static bool is_path_text(const Token* tokens, size_t ntokens, const char* text, size_t tlen) {
        size_t at = 0;
        for (size_t i = 0; i < ntokens; ++i) {
            if (i != 0) {
                if (at >= tlen || text[at] != '.') return false;
                ++at;
            }
            const Token& t = tokens[i];
            const char* word = t.kind == STAR ? "*" : t.kind == HASH ? "#" : t.data;
            size_t n = t.kind == 0 ? t.size : 1;
            if (tlen - at < n || std::memcmp(text + at, word, n) != 0) return false;
            at += n;
        }
        return at == tlen;
    }

    // The labels from the root to node `i` joined by '.' (wildcards as '*' and '#').
    std::string path_text(uint32_t i) const {
        uint32_t i_tail = nodes_[i].is_tail() ? i : NO_NODE;
        std::vector<uint32_t> labels;
        for (; i != 0; i = nodes_[i].parent) labels.push_back(nodes_[i].label);
        std::string out;
        for (size_t k = labels.size(); k-- > 0;) {
            uint32_t label = labels[k];
            if (k + 1 != labels.size()) out.push_back('.');
            if (label == STAR) out.push_back('*');
            else if (label == HASH) out.push_back('#');
            else out.append(words_[label].text);
        }
        if (i_tail != NO_NODE) {
            uint32_t at = nodes_[i_tail].tail_at();
            for (uint32_t k = 1; k <= tails_[at]; ++k) {
                out.push_back('.');
                out.append(words_[tails_[at + k]].text);
            }
        }
        return out;
    }

    const char* text_of(const IdSlot& s, uint32_t* size) const {
        if (s.text == NO_TEXT) {
            text_scratch_ = path_text(s.node);
            *size = static_cast<uint32_t>(text_scratch_.size());
            return text_scratch_.data();
        }
        const Text& t = texts_[s.text];
        *size = t.len;
        return arena_.data() + t.off;
    }

    // Unlink text `ti` (no ids left) from `leaf`, free its record, and compact the arena
    // once removed texts fill half of it (amortized O(1) per removal).
    void drop_text(Node& leaf, uint32_t ti) {
        uint32_t* link = &leaf.texts;
        while (*link != ti) link = &texts_[*link].next;
        *link = texts_[ti].next;
        garbage_ += texts_[ti].len;
        texts_[ti] = Text{0, 0, 0, free_text_};
        free_text_ = ti;
        if (garbage_ > 4096 && garbage_ * 2 > arena_.size()) compact_arena();
    }

    // Copy the live texts to a fresh arena: O(texts).
    void compact_arena() {
        std::string fresh;
        fresh.reserve(arena_.size() - garbage_);
        for (Text& t : texts_)
            if (t.refs != 0) {
                uint32_t off = static_cast<uint32_t>(fresh.size());
                fresh.append(arena_, t.off, t.len);
                t.off = off;
            }
        arena_.swap(fresh);
        garbage_ = 0;
    }

    size_t max_nodes_ = MAX_NODES, max_tail_entries_ = MAX_TAIL_ENTRIES;  // (lower_capacity)
    size_t max_text_bytes_ = MAX_TEXT_BYTES;
    std::vector<Node> nodes_;
    // Per node: the '#' nodes below it (the walk's HAS_FEEDS tag, and its test of
    // spent()).
    std::vector<uint32_t> hashes_below_;
    std::vector<uint32_t> tail_counts_;  // patterns per tail length (see max_tail())
    uint32_t max_tail_ = 0;
    std::vector<uint32_t> free_nodes_;
    std::vector<IdVec> idvecs_;          // ids of nodes holding two or more (Node::ids)
    std::vector<uint32_t> free_idvecs_;
    std::vector<CachedSlot> cached_;     // allocated on the first kept result
    ResultGate gate_;                    // whether matches use cached_ and combos_
    std::vector<uint32_t> tails_;        // per tail leaf: its word count, then the words
    size_t tail_garbage_ = 0;            // entries of tails_ no leaf uses
    // Walk scratch: tail leaves reached, each with the position of the word after the one
    // that reached it; their tails are compared at the end of the walk (see tails_matched).
    std::vector<std::pair<uint32_t, uint32_t>> tail_ends_;
    std::vector<Edge> edges_;
    std::vector<IdSlot> idslots_;
    std::vector<WordEntry> words_;
    std::vector<uint32_t> free_words_;
    std::vector<WordSlot> wordslots_;
    // The tuple index (see tuple_walk): its table, each node's slot in it (or NO_TUPLE /
    // UNTUPLED), the end nodes it cannot hold, and per pattern length the shapes in use
    // with their entry counts.
    std::vector<Tuple> tuples_;
    std::vector<uint32_t> tuple_at_;
    uint32_t tuple_count_ = 0, untupled_ = 0;
    bool tuples_on_ = true;  // see settle_tuples
    std::vector<std::pair<uint32_t, uint32_t>> shapes_[TUPLE_WORDS + 1];
    uint32_t node_count_ = 1, hash_count_ = 0, id_count_ = 0, edge_count_ = 0, word_count_ = 0;
    uint32_t epoch_ = 0;
    uint32_t root_ref_ = 0;  // tags(0), kept by retag(0): where every walk starts
    uint64_t version_ = 1;
    int edge_shift_ = 60;  // 64 - log2(edges_.size())
    std::vector<ComboSlot> combos_;  // allocated on the first walk that ends on several nodes
    // Scratch of the '#' walk (reused: walks never overlap, see the header comment).
    Scratch level_, next_;
    Scratch end_ids_;  // the ends' Node::ids (Ends::ids)
    Scratch reaching_;  // hash_walk: a level's stepped entries with a '#' child
    std::vector<uint32_t> active_, slot_of_, slot_word_, reached_, memo_touched_;
    std::vector<std::vector<uint32_t>> by_word_;  // per slot: children of active '#' nodes
    static constexpr size_t SCRATCH = 256;  // first '#' walk: room per list up front (below)
    static constexpr size_t MEMO_SLOTS = 16;      // distinct topic words the memo table covers
    struct Memo;
    std::vector<Memo> memo_;
    struct ActiveBelow {  // trivial: active_below_ grows by memset (see grow_active_below)
        uint32_t epoch;   // the walk it counts for (0: none)
        uint32_t active;  // '#' nodes below the node made active in that walk's pruned part
    };
    // Per node, grown by pruned walks: see spent().
    std::vector<ActiveBelow, NoInit<ActiveBelow>> active_below_;
    bool counting_ = false;  // hash_walk: activations are counted (its pruned part)

    // Fibonacci hashing: one multiply, the top bits (the walk computes one per step).
    size_t edge_bucket(uint32_t parent, uint32_t word) const {
        uint64_t key = (static_cast<uint64_t>(parent) << 32) | word;
        return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> edge_shift_);
    }
    static size_t combo_bucket(const uint32_t* nodes, uint32_t n) {
        uint64_t h = n;
        for (uint32_t i = 0; i < n; ++i) h = mix64(h ^ (static_cast<uint64_t>(nodes[i]) << 20));
        return static_cast<size_t>(h & (COMBO_SLOTS - 2));  // a pair's first slot
    }
    static size_t cached_bucket(uint32_t node) {
        return static_cast<size_t>((static_cast<uint64_t>(node) * 0x9E3779B97F4A7C15ULL) >> 48);
    }
    static size_t id_bucket(uint32_t id) {
        return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> 20);
    }

    // -- the tuple index -----------------------------------------------------------------

    // Shapes past which a topic length is walked, not looked up: each is one probe.
    static constexpr size_t MAX_SHAPES = 8;

    static uint64_t tuple_hash(uint32_t shape, const uint32_t* words, size_t n) {
        uint64_t h = shape;
        for (size_t i = 0; i < n; ++i) h = (h ^ words[i]) * 0x9E3779B97F4A7C15ULL;
        return h ^ (h >> 32);  // the table takes low bits: fold in the high ones, which see all
    }

    // What a walk finds, without walking, while every end node is in the index (no '#'
    // pattern, none longer than TUPLE_WORDS) and the topic's length has at most MAX_SHAPES
    // shapes: one probe per shape, all independent (their lines are asked for at once), so
    // no level waits for the one before it. "Tuple space search" (Srinivasan et al., 1999;
    // Open vSwitch's classifier). On the scaled bench (four shapes) a match costs ≈40 ns
    // less than the level walk (218-245 against 261-300 ns; bench/walk_layouts.py compares
    // the two alone); on the throughput bench's 1,000 hot patterns about as much as it.
    // The table is at most 3/4 full: at 1/2 its lines were twice as many and the gain came
    // and went with the neighbours' use of the shared cache.
    Ends tuple_walk(const uint32_t* words, size_t n) {
        const auto& shapes = shapes_[n];
        uint32_t keys[MAX_SHAPES][TUPLE_WORDS];
        uint32_t wanted[MAX_SHAPES];
        size_t slots[MAX_SHAPES];
        size_t probes = 0;
        const size_t mask = tuples_.size() - 1;
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
            __builtin_prefetch(&tuples_[slots[probes]]);
            ++probes;
        }
        uint32_t* level = room(level_, probes + 1);
        uint32_t* ids = room(end_ids_, probes + 1);
        size_t count = 0;
        for (size_t q = 0; q < probes; ++q)
            for (size_t i = slots[q];; i = (i + 1) & mask) {
                const Tuple& t = tuples_[i];
                if (t.shape == 0) break;
                if (t.shape == wanted[q] && std::equal(keys[q], keys[q] + n, t.words)) {
                    level[count] = t.ref;
                    ids[count++] = t.ids;
                    break;
                }
            }
        prefetch_results(level, ids, count);
        return Ends{level, ids, count};
    }

    // The key of the pattern ending at node `i` (its words from the root, a tail leaf's
    // included; STAR for '*'): its length, or 0 when the index cannot hold it (a '#', more
    // than TUPLE_WORDS words, the root). O(depth), at most TUPLE_WORDS + 1 steps.
    uint32_t tuple_key(uint32_t i, uint32_t* words, uint32_t* shape) const {
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
    void sync_tuple(uint32_t i) {
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
        if ((tuple_count_ + 1) * 4 > tuples_.size() * 3) grow_tuples();  // add() made room first
        place_tuple(t);
        ++tuple_count_;
        count_shape(shapes_[n], t.shape, 1);
    }

    // One entry of `shape` more (delta 1) or fewer (-1) in `shapes` (a length's shapes in
    // use with their entry counts; a shape leaves when its count reaches 0).
    static void count_shape(std::vector<std::pair<uint32_t, uint32_t>>& shapes, uint32_t shape,
                            int delta) {
        auto s = std::find_if(shapes.begin(), shapes.end(),
                              [&](const auto& p) { return p.first == shape; });
        if (s == shapes.end()) s = shapes.emplace(shapes.end(), shape, 0);
        s->second += static_cast<uint32_t>(delta);
        if (s->second == 0) shapes.erase(s);
    }

    void place_tuple(const Tuple& t) {
        const size_t mask = tuples_.size() - 1;
        size_t i = tuple_hash(t.shape, t.words, t.shape >> 16) & mask;
        while (tuples_[i].shape != 0) i = (i + 1) & mask;
        tuples_[i] = t;
        tuple_at_[t.ref & INDEX] = static_cast<uint32_t>(i);
    }

    // At most 3/4 full; grown before the trie changes (add) so that an entry's insertion
    // allocates nothing.
    void reserve_tuple() {
        if (tuples_on_ && (tuple_count_ + 1) * 4 > tuples_.size() * 3) grow_tuples();
    }

    void grow_tuples() {
        std::vector<Tuple> old;
        old.swap(tuples_);
        tuples_.assign(std::max<size_t>(16, old.size() * 2), Tuple{});
        for (const Tuple& t : old)
            if (t.shape != 0) place_tuple(t);
    }

    // Backward-shift deletion (no tombstones: probing stays exact).
    void erase_tuple(uint32_t i) {
        const size_t mask = tuples_.size() - 1;
        const uint32_t shape = tuples_[i].shape;
        for (size_t j = (i + 1) & mask; tuples_[j].shape != 0; j = (j + 1) & mask) {
            const Tuple& t = tuples_[j];
            size_t home = tuple_hash(t.shape, t.words, t.shape >> 16) & mask;
            if (((j - home) & mask) >= ((j - i) & mask)) {
                tuples_[i] = t;
                tuple_at_[t.ref & INDEX] = static_cast<uint32_t>(i);
                i = static_cast<uint32_t>(j);
            }
        }
        tuples_[i] = Tuple{};
        --tuple_count_;
        count_shape(shapes_[shape >> 16], shape, -1);
    }

    // After a write: the index is kept only while it can answer, that is while every end
    // node is in it. A pattern it cannot hold ('#', more than TUPLE_WORDS words) drops it,
    // memory and all (the service's market patterns include '#' ones: an index there would
    // cost ≈70 bytes a subscription and never answer), and the write that removes the last
    // such pattern builds it again, O(end nodes).
    void settle_tuples() {
        if (untupled_ != 0 && tuples_on_) drop_tuples();
        else if (untupled_ == 0 && !tuples_on_) build_tuples();
    }

    void drop_tuples() {
        std::vector<Tuple>().swap(tuples_);
        for (uint32_t& at : tuple_at_)
            if (at != UNTUPLED) at = NO_TUPLE;
        for (auto& shapes : shapes_) shapes.clear();
        tuple_count_ = 0;
        tuples_on_ = false;
    }

    // All or nothing: out of memory, the index stays off and the walk answers.
    void build_tuples() {
        try {
            size_t ends = 0;
            for (const Node& n : nodes_) ends += n.live() && n.nids != 0;
            size_t size = 16;
            while ((ends + 1) * 4 > size * 3) size *= 2;
            tuples_.assign(size, Tuple{});
            tuples_on_ = true;
            for (uint32_t i = 0; i < nodes_.size(); ++i)
                if (nodes_[i].live() && nodes_[i].nids != 0) sync_tuple(i);
        } catch (const std::bad_alloc&) {
            drop_tuples();
        }
    }

    // The index against the trie: while on, every end node's entry (or UNTUPLED), nothing
    // else; off exactly while some end node is UNTUPLED, and then empty.
    std::string check_tuples() const {
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
            if (at >= tuples_.size()) return "end node without its tuple";
            const Tuple& t = tuples_[at];
            if (t.shape != shape || !std::equal(words, words + n, t.words)) return "tuple key";
            if (t.ref != (i | tags(i)) || t.ids != nodes_[i].ids) return "tuple mirror";
            ++entries;
            count_shape(shapes[n], shape, 1);
        }
        if (entries != tuple_count_ || untupled != untupled_) return "tuple counts";
        if (!tuples_on_) return tuples_.empty() ? "" : "tuples kept while off";
        uint32_t occupied = 0;
        const size_t mask = tuples_.size() - 1;
        for (size_t i = 0; i < tuples_.size(); ++i) {
            const Tuple& t = tuples_[i];
            if (t.shape == 0) continue;
            ++occupied;
            if (tuple_at_[t.ref & INDEX] != i) return "tuple slot";
            for (size_t j = tuple_hash(t.shape, t.words, t.shape >> 16) & mask; j != i;
                 j = (j + 1) & mask)
                if (tuples_[j].shape == 0) return "tuple unreachable";
        }
        if (occupied != tuple_count_) return "tuple table count";
        for (uint32_t n = 0; n <= TUPLE_WORDS; ++n) {
            auto want = shapes[n], got = shapes_[n];
            std::sort(want.begin(), want.end());
            std::sort(got.begin(), got.end());
            if (want != got) return "tuple shapes";
        }
        return "";
    }

    Ends plain_walk(const uint32_t* words, size_t n) {
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
        const size_t mask = edges_.size() - 1;
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
                        uint32_t c = nodes_[ref & INDEX].star;
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
                        uint32_t c = nodes_[ref & INDEX].star;
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
    void prefetch_results(const uint32_t* level, const uint32_t* ids, size_t count) const {
        const bool kept = !cached_.empty() && !gate_.bypassing();
        for (size_t j = 0; j < count; ++j) {
            const uint32_t ref = level[j];
            if (ref & HAS_MANY) __builtin_prefetch(&idvecs_[ids[j]]);
            if (kept && (ref & HAS_IDS)) __builtin_prefetch(&cached_[cached_bucket(ref & INDEX)]);
        }
    }

    // `v`'s storage with room for at least `need` entries (it grows, never shrinks; its
    // entries are kept).
    static uint32_t* room(Scratch& v, size_t need) {
        if (v.size() < need) v.resize(std::max(need, 2 * v.size()));
        return v.data();
    }

    // A level's probes are independent of each other: asking for all their cache lines
    // first overlaps the misses (the walk is bound by them on large tries, profiled).
    void prefetch_level(const uint32_t* level, size_t count, uint32_t w) const {
        size_t mask = edges_.size() - 1;
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
    void reach(uint32_t ref) {
        if (!(ref & HAS_HASH)) return;
        // The '#' node's stamp says whether it is active already (its line is read once
        // more at the end, for its ids, when it has some).
        uint32_t href = nodes_[ref & INDEX].hash;
        Node& h_node = nodes_[href & INDEX];
        if (h_node.star == epoch_) return;  // a '#' node's stamp (see Node)
        h_node.star = epoch_;
        active_.push_back(href);
        if (counting_) count_active(href & INDEX);
        if (!(href & HAS_KIDS)) return;
        uint32_t h = href & INDEX;
        const uint32_t* slot_word = slot_word_.data();
        const size_t k = slot_word_.size();
        const Edge* edges = edges_.data();
        const size_t mask = edges_.size() - 1;
        std::vector<uint32_t>* lists = by_word_.data();
        for (size_t slot = 0; slot < k; ++slot) {
            uint32_t c = probe(edges, mask, h, slot_word[slot])->child;
            if (c != NO_NODE) lists[slot].push_back(c);
        }
    }

    // What the children of the '#' nodes' children for the word in slot `prev` (the
    // level's "static" part: by_word_[prev][:len]) contribute for the next word, `slot`.
    // Once every '#' node is active the same lists recur at every position with the same
    // word, so the contribution is kept per (prev, slot) pair for the rest of the walk and
    // only extended by entries added since (lists only grow during a walk).
    struct Memo {
        uint32_t done = 0;     // by_word_[prev][:done] are accounted for in `out`
        uint32_t reached = 0;  // out[:reached] went through reach() already
        // In the pruned part of a walk, out[:reached] were also found not spent while
        // active_ held `proved_active` '#' nodes; while it still does, they still are not
        // (see static_step)
        uint32_t proved_active = 0;
        Scratch out;
    };

    void reset_memos() {
        for (uint32_t index : memo_touched_) {
            memo_[index].done = memo_[index].reached = 0;
            memo_[index].out.clear();
        }
        memo_touched_.clear();
    }

    // `prove`: before the cut, drop from the kept contribution for good what no longer
    // matters (nodes without HAS_FEEDS, spent ones; see hash_walk).
    void static_step(uint32_t prev, uint32_t len, uint32_t slot, uint32_t w, uint32_t keep,
                     bool prove, Scratch& next) {
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
            // exists, the walk's least predictable (the adversarial topics' cold cost is
            // mostly the branch predictors' state after a build, measured).
            const uint32_t* list = by_word_[prev].data();
            const size_t at = m.out.size();
            m.out.resize(at + 2 * static_cast<size_t>(len - m.done));
            uint32_t* out = m.out.data() + at;
            const Edge* edges = edges_.data();
            const size_t mask = edges_.size() - 1;
            const Node* nodes = nodes_.data();
            const bool known = w != UNKNOWN_WORD;
            for (uint32_t j = m.done; j < len; ++j) {
                uint32_t ref = list[j];
                if ((ref & HAS_KIDS) && known) {
                    *out = probe(edges, mask, ref & INDEX, w)->child;
                    out += *out != NO_NODE;
                }
                if (ref & HAS_STAR) *out++ = nodes[ref & INDEX].star;
            }
            m.out.resize(static_cast<size_t>(out - m.out.data()));
            m.done = len;
        }
        if (prove) {
            // Dropped entries need no reach(): without a '#' below, or with it active.
            // (spent() does not touch m.out.) Whether a node is spent changes only when a
            // '#' node becomes active, so with none activated since this memo's last pass
            // only the entries added since are checked (the adversarial topics activate
            // most of theirs in the first 40 words: later levels mostly skip the pass).
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
    bool spent(uint32_t x) const {
        const ActiveBelow& p = active_below_[x];
        return p.epoch == epoch_ && p.active == hashes_below_[x];
    }

    // '#' node `h` became active in the pruned part of a walk: one more active below each
    // of its ancestors. O(depth), once per '#' node and walk.
    void count_active(uint32_t h) {
        each_above(h, [&](uint32_t a) {
            ActiveBelow& p = active_below_[a];
            if (p.epoch != epoch_) p = ActiveBelow{epoch_, 0};
            ++p.active;
        });
    }

    // active_below_ to one per node, the new ones empty (epoch 0): one memset, not a
    // constructor call per node (5,000 instructions of a first walk over 2,300 nodes).
    void grow_active_below() {
        size_t from = active_below_.size();
        active_below_.resize(nodes_.size());
        std::memset(static_cast<void*>(active_below_.data() + from), 0,
                    (active_below_.size() - from) * sizeof(ActiveBelow));
    }

    // The '#' walk's scratch, allocated once (by the first '#' pattern's add(): a first
    // match would otherwise pay for ~30 allocations and their first touch, callgrind).
    void prepare_hash_walk() {
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

    Ends hash_walk(const uint32_t* words, size_t n, std::vector<uint32_t>* level_sizes) {
        prepare_hash_walk();  // (a matcher without '#' walks here for level_sizes)
        if (++epoch_ == 0) {  // wrapped: forget every stamp
            for (Node& node : nodes_)
                if (node.is_hash()) node.star = 0;  // the stamp (see Node)
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
                const size_t mask = edges_.size() - 1;
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
                    if (ref & HAS_STAR) emit(nodes[ref & INDEX].star);
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

    // Node `i`'s tags or ids field changed: rewrite the one reference to it (in its parent),
    // and, in a literal edge, the ids mirror (see Edge).
    void retag(uint32_t i) {
        if (i == 0) {  // nobody's child: its reference is kept for the walks
            root_ref_ = tags(0);
            sync_tuple(0);  // (a pattern of no words: the index cannot hold it)
            return;
        }
        const Node& n = nodes_[i];
        uint32_t ref = i | tags(i);
        if (n.label == STAR) {
            nodes_[n.parent].star = ref;
        } else if (n.label == HASH) {
            nodes_[n.parent].hash = ref;
        } else {
            size_t mask = edges_.size() - 1;
            size_t k = edge_bucket(n.parent, n.label) & mask;
            while (!(edges_[k].parent == n.parent && edges_[k].word == n.label &&
                     edges_[k].child != NO_NODE))
                k = (k + 1) & mask;
            edges_[k].child = ref;
            edges_[k].ids = n.ids;
        }
        sync_tuple(i);
    }

    uint32_t new_node(uint32_t parent, uint32_t label) {
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
    uint32_t tail_length(uint32_t leaf) const {
        uint32_t n = nodes_[leaf].is_tail() ? tails_[nodes_[leaf].tail_at()] : 0;
        for (uint32_t h = leaf; h != 0 && !nodes_[h].is_hash(); h = nodes_[h].parent) ++n;
        return n;
    }

    // f(a) for every node above node `i`, its parent first, the root last. O(depth).
    template <class F>
    void each_above(uint32_t i, F&& f) const {
        for (uint32_t a = nodes_[i].parent;; a = nodes_[a].parent) {
            f(a);
            if (a == 0) break;
        }
    }

    // A pattern ending at `leaf` comes (delta +1) or goes (-1): its tail (the tokens after
    // its last '#', or all of them) is counted for max_tail(). O(depth).
    void count_pattern(uint32_t leaf, int delta) {
        const uint32_t tail = tail_length(leaf);
        if (tail_counts_.size() <= tail) tail_counts_.resize(tail + 1, 0);
        tail_counts_[tail] += static_cast<uint32_t>(delta);
        if (tail > max_tail_ && tail_counts_[tail]) max_tail_ = tail;
        while (max_tail_ > 0 && tail_counts_[max_tail_] == 0) --max_tail_;
    }

    // '#' node `h` comes (delta +1) or goes (-1): every node above it (root included) has
    // one more or one less below (hashes_below_), and HAS_FEEDS when it has any. O(depth).
    void count_hash(uint32_t h, int delta) {
        each_above(h, [&](uint32_t a) {
            uint32_t before = hashes_below_[a];
            hashes_below_[a] = before + static_cast<uint32_t>(delta);
            if ((before == 0) != (hashes_below_[a] == 0)) retag(a);
        });
    }

    void free_node(uint32_t i) {
        nodes_[i] = Node();  // empty: no ids (pop_id released them), no kept result
        free_nodes_.push_back(i);
        --node_count_;
    }

    // -- tail leaves ---------------------------------------------------------------------------

    // A walk reached tail leaf `ref` with `pos` words consumed. Comparing its tail there
    // would put two dependent cache misses (the leaf, then its words) on the walk's path,
    // for a node that leads nowhere else: the leaf's line is asked for now and the
    // comparison waits for the end of the walk (tails_matched).
    void reach_tail(uint32_t ref, uint32_t pos) {
        __builtin_prefetch(&nodes_[ref & INDEX]);
        tail_ends_.emplace_back(ref, pos);
    }

    // Write after `out[:count]` the tail leaves reached whose tail is the rest of the topic
    // (the caller made room for all of them), after asking for all their tails' lines at
    // once; returns the new count.
    size_t tails_matched(const uint32_t* words, size_t n, uint32_t* out, size_t count) const {
        if (tail_ends_.size() > 1)
            for (const auto& t : tail_ends_)
                __builtin_prefetch(tails_.data() + nodes_[t.first & INDEX].tail_at());
        for (const auto& t : tail_ends_)
            if (tail_matches(t.first, words + t.second, n - t.second)) out[count++] = t.first;
        return count;
    }

    // ids[from:to] := the Node::ids of the ends level[from:to] that hold ids (Ends::ids),
    // read from the nodes: for ends not reached through a probed edge.
    void ids_from_nodes(const uint32_t* level, uint32_t* ids, size_t from, size_t to) const {
        for (size_t j = from; j < to; ++j)
            if (level[j] & HAS_IDS) ids[j] = nodes_[level[j] & INDEX].ids;
    }

    // Whether the topic's words after the one that reached tail leaf `ref` are its tail:
    // then it is an end node. A tail leaf has no '#' above it, so it is reached only at
    // one position of a walk, from its one parent, and this check is the whole rest.
    bool tail_matches(uint32_t ref, const uint32_t* rest, size_t nrest) const {
        const uint32_t* t = tails_.data() + nodes_[ref & INDEX].tail_at();
        if (t[0] != nrest) return false;
        for (size_t k = 0; k < nrest; ++k)
            if (t[k + 1] != rest[k]) return false;
        return true;
    }

    // Whether the literal `tokens[:n]` are tail leaf `leaf`'s tail.
    bool same_tail(uint32_t leaf, const Token* tokens, size_t n) const {
        const uint32_t* t = tails_.data() + nodes_[leaf].tail_at();
        if (t[0] != n) return false;
        for (size_t k = 0; k < n; ++k)
            if (tokens[k].kind != 0 || word_id(tokens[k].data, tokens[k].size) != t[k + 1])
                return false;
        return true;
    }

    uint32_t new_tail(const Token* tokens, size_t n) {
        size_t at = tails_.size();
        // room() said it fits and add() compacted: a write that gets here broke that.
        if (at + n + 1 > max_tail_entries_) throw std::length_error("tail arena full");
        tails_.push_back(static_cast<uint32_t>(n));
        for (size_t k = 0; k < n; ++k) {
            uint32_t w = intern(tokens[k].data, tokens[k].size);
            ++words_[w].refs;  // a word's refs: edges labelled with it and tails holding it
            tails_.push_back(w);
        }
        return static_cast<uint32_t>(at);
    }

    // Tail leaf `leaf` becomes a chain of ordinary nodes (a new pattern goes through or
    // beside it); the leaf keeps its index (the id table points at it) at the chain's end.
    void unfold(uint32_t leaf) {
        uint32_t at = nodes_[leaf].tail_at();
        std::vector<uint32_t> words(tails_.begin() + at + 1, tails_.begin() + at + 1 + tails_[at]);
        tail_garbage_ += 1 + words.size();
        nodes_[leaf].star = NO_NODE;
        uint32_t parent = nodes_[leaf].parent, label = nodes_[leaf].label;
        erase_edge(parent, label);
        for (uint32_t w : words) {  // each word's ref moves from the tail to an edge
            uint32_t n = new_node(parent, label);
            nodes_[n].nchildren = 1;
            insert_edge(parent, label, n);
            parent = n;
            label = w;
        }
        nodes_[leaf].parent = parent;
        nodes_[leaf].label = label;
        insert_edge(parent, label, leaf);
        compact_tails();
        sync_tuple(leaf);  // no longer a tail leaf: its reference's tags changed, not its key
    }

    // Tail leaf `i` is being freed: release its words and its entries.
    void drop_tail(uint32_t i) {
        uint32_t at = nodes_[i].tail_at();
        uint32_t n = tails_[at];
        for (uint32_t k = 1; k <= n; ++k) release_word(tails_[at + k]);
        tail_garbage_ += 1 + n;
        nodes_[i].star = NO_NODE;
        compact_tails();
    }

    // Once unused entries fill half of tails_ (or, `force`d, when a new tail would not fit
    // beside them), copy the live ones (amortized O(1) per entry freed; O(nodes) to find
    // the leaves).
    void compact_tails(bool force = false) {
        if (!force && (tail_garbage_ <= 4096 || tail_garbage_ * 2 <= tails_.size())) return;
        std::vector<uint32_t> fresh;
        fresh.reserve(tails_.size() - tail_garbage_);
        for (Node& n : nodes_) {
            if (!n.live() || !n.is_tail()) continue;
            uint32_t at = n.tail_at();
            n.star = HAS_TAIL | static_cast<uint32_t>(fresh.size());
            fresh.insert(fresh.end(), tails_.begin() + at, tails_.begin() + at + 1 + tails_[at]);
        }
        tails_.swap(fresh);
        tail_garbage_ = 0;
    }

    // -- a node's ids ------------------------------------------------------------------------

    void push_id(Node& n, uint32_t id) {
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
    uint32_t pop_id(Node& n, uint32_t pos) {
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

    void drop_cached(uint32_t i) {
        if (cached_.empty()) return;
        CachedSlot& c = cached_[cached_bucket(i)];
        if (c.node_plus1 != i + 1) return;
        PyObject* old = c.result;
        c = CachedSlot();
        Py_XDECREF(old);  // an Ids: frees memory, runs no Python code
    }

    // -- words -------------------------------------------------------------------------------

    // word_id of a word of n < 8 bytes, given packed (pack_short).
    uint32_t short_word_id(uint64_t packed, uint32_t n) const {
        const uint64_t key = short_key_of(packed, n);
        const uint32_t h32 = static_cast<uint32_t>(mix64(hash_seed(n) ^ packed) >> 32);  // hash_bytes
        const size_t mask = wordslots_.size() - 1;
        for (size_t i = h32 & mask;; i = (i + 1) & mask) {
            const WordSlot& s = wordslots_[i];
            if (s.id_plus1 == 0) return UNKNOWN_WORD;
            if (s.hash32 == h32 && s.key == key) return s.id_plus1 - 1;
        }
    }

    // word_id of a word of n >= 8 bytes (its slot's key is 0: the text is compared).
    uint32_t long_word_id(const char* p, uint32_t n) const {
        const uint32_t h32 = static_cast<uint32_t>(hash_bytes(p, n) >> 32);
        const size_t mask = wordslots_.size() - 1;
        for (size_t i = h32 & mask;; i = (i + 1) & mask) {
            const WordSlot& s = wordslots_[i];
            if (s.id_plus1 == 0) return UNKNOWN_WORD;
            if (s.hash32 != h32 || s.key != 0) continue;
            const std::string& w = words_[s.id_plus1 - 1].text;
            if (w.size() == n && same_bytes(w.data(), p, n)) return s.id_plus1 - 1;
        }
    }

    // A word of split_words: packed holds its bytes when it has fewer than 8.
    uint32_t word_at(const char* p, size_t n, uint64_t packed) const {
        return n < 8 ? short_word_id(packed, static_cast<uint32_t>(n))
                     : long_word_id(p, static_cast<uint32_t>(n));
    }

    uint32_t intern(const char* p, uint32_t size) {
        uint32_t w = word_id(p, size);
        if (w != UNKNOWN_WORD) return w;
        if ((word_count_ + 1) * 4 > wordslots_.size() * 3) grow_words();
        if (!free_words_.empty()) {
            w = free_words_.back();
            free_words_.pop_back();
        } else {
            w = static_cast<uint32_t>(words_.size());
            words_.emplace_back();
        }
        WordEntry& e = words_[w];
        e.text.assign(p, size);
        e.hash = hash_bytes(p, size);
        e.refs = 0;
        place_word(w);
        ++word_count_;
        return w;
    }

    void place_word(uint32_t w) {
        uint32_t h32 = static_cast<uint32_t>(words_[w].hash >> 32);
        size_t mask = wordslots_.size() - 1;
        size_t i = h32 & mask;
        while (wordslots_[i].id_plus1 != 0) i = (i + 1) & mask;
        const std::string& text = words_[w].text;
        wordslots_[i] = WordSlot{h32, w + 1, short_key(text.data(), text.size())};
    }

    void grow_words() {
        std::vector<WordSlot> old;
        old.swap(wordslots_);
        wordslots_.assign(old.size() * 2, WordSlot{0, 0, 0});
        for (const WordSlot& s : old)
            if (s.id_plus1 != 0) place_word(s.id_plus1 - 1);
    }

    // A word's last edge is gone: forget it (backward-shift deletion keeps probing exact).
    void release_word(uint32_t w) {
        if (--words_[w].refs != 0) return;
        size_t mask = wordslots_.size() - 1;
        size_t i = static_cast<uint32_t>(words_[w].hash >> 32) & mask;
        while (wordslots_[i].id_plus1 != w + 1) i = (i + 1) & mask;
        for (size_t j = (i + 1) & mask; wordslots_[j].id_plus1 != 0; j = (j + 1) & mask) {
            size_t home = wordslots_[j].hash32 & mask;
            if (((j - home) & mask) >= ((j - i) & mask)) {
                wordslots_[i] = wordslots_[j];
                i = j;
            }
        }
        wordslots_[i] = WordSlot{0, 0, 0};
        std::string().swap(words_[w].text);
        free_words_.push_back(w);
        --word_count_;
    }

    // -- edges -------------------------------------------------------------------------------

    // The edge (parent, word) to node `c` (its reference and ids mirror taken from it).
    void insert_edge(uint32_t parent, uint32_t word, uint32_t c) {
        if ((edge_count_ + 1) * 4 > edges_.size() * 3) {
            std::vector<Edge> old;
            old.swap(edges_);
            edges_.assign(old.size() * 2, Edge{0, 0, NO_NODE, 0});
            --edge_shift_;
            for (const Edge& e : old)
                if (e.child != NO_NODE) place_edge(e);
        }
        place_edge(Edge{parent, word, c | tags(c), nodes_[c].ids});
        ++edge_count_;
    }

    void place_edge(const Edge& e) {
        size_t mask = edges_.size() - 1;
        size_t i = edge_bucket(e.parent, e.word) & mask;
        while (edges_[i].child != NO_NODE) i = (i + 1) & mask;
        edges_[i] = e;
    }

    void erase_edge(uint32_t parent, uint32_t word) {
        size_t mask = edges_.size() - 1;
        size_t i = edge_bucket(parent, word) & mask;
        while (!(edges_[i].parent == parent && edges_[i].word == word && edges_[i].child != NO_NODE))
            i = (i + 1) & mask;
        for (size_t j = (i + 1) & mask; edges_[j].child != NO_NODE; j = (j + 1) & mask) {
            size_t home = edge_bucket(edges_[j].parent, edges_[j].word) & mask;
            if (((j - home) & mask) >= ((j - i) & mask)) {
                edges_[i] = edges_[j];
                i = j;
            }
        }
        edges_[i] = Edge{0, 0, NO_NODE, 0};
        --edge_count_;
    }

    // -- ids -----------------------------------------------------------------------------------

    const IdSlot* find_id(uint32_t id) const {
        size_t mask = idslots_.size() - 1;
        for (size_t i = id_bucket(id) & mask;; i = (i + 1) & mask) {
            const IdSlot& s = idslots_[i];
            if (s.node == EMPTY_SLOT) return nullptr;
            if (s.id == id) return &s;
        }
    }
    IdSlot* find_id(uint32_t id) {
        return const_cast<IdSlot*>(static_cast<const Core*>(this)->find_id(id));
    }

    void place_id(const IdSlot& slot) {
        size_t mask = idslots_.size() - 1;
        size_t i = id_bucket(slot.id) & mask;
        while (idslots_[i].node != EMPTY_SLOT) i = (i + 1) & mask;
        idslots_[i] = slot;
    }

    void insert_id(uint32_t id, uint32_t node, uint32_t text, uint32_t pos) {
        if ((id_count_ + 1) * 5 > idslots_.size() * 4) {
            std::vector<IdSlot> old;
            old.swap(idslots_);
            idslots_.assign(old.size() * 2, IdSlot{0, EMPTY_SLOT, 0, 0});
            for (const IdSlot& s : old)
                if (s.node != EMPTY_SLOT) place_id(s);
        }
        place_id(IdSlot{id, node, text, pos});
        ++id_count_;
    }

    void erase_id(uint32_t id) {
        size_t mask = idslots_.size() - 1;
        size_t i = id_bucket(id) & mask;
        while (idslots_[i].id != id || idslots_[i].node == EMPTY_SLOT) i = (i + 1) & mask;
        for (size_t j = (i + 1) & mask; idslots_[j].node != EMPTY_SLOT; j = (j + 1) & mask) {
            size_t home = id_bucket(idslots_[j].id) & mask;
            if (((j - home) & mask) >= ((j - i) & mask)) {
                idslots_[i] = idslots_[j];
                i = j;
            }
        }
        idslots_[i] = IdSlot{0, EMPTY_SLOT, 0, 0};
        --id_count_;
    }
};

}  // namespace topicstore
