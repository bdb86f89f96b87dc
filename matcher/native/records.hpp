// The records the core's tables hold: pattern texts, a node's ids, trie nodes, literal
// edges, the id table's and the word table's slots, the tuple index's entries, and the
// kept results. Their sizes are part of the design (a cache line holds a whole number of
// them): the static_asserts keep them.
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "base.hpp"
#include "table.hpp"

namespace topicstore {

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
    uint32_t hash = NO_NODE;  // tagged reference to the '#' child
    uint32_t parent = 0;
    uint32_t label = FREE;    // the edge from the parent: a word id, STAR or HASH; FREE: unused
    uint32_t nchildren = 0;   // literal edges out
    uint32_t texts = NO_TEXT; // first distinct text of the ids that is not the path's (see Text)
    uint32_t nids = 0;        // subscriptions ending here
    uint32_t ids = 0;         // nids == 1: the id; nids >= 2: its IdVec in Core::idvecs_

    bool live() const { return label != FREE; }
    bool is_hash() const { return label == HASH; }
    bool empty() const {
        return nids == 0 && nchildren == 0 && star() == NO_NODE && hash == NO_NODE;
    }

    // The tagged reference to the '*' child; NO_NODE when there is none.
    uint32_t star() const { return is_hash() || (by_kind_ & HAS_TAIL) ? NO_NODE : by_kind_; }
    // star() of a node whose reference is tagged HAS_STAR (so neither a '#' node nor a tail
    // leaf), without testing which: the walks' step.
    uint32_t star_child() const { return by_kind_; }
    void set_star(uint32_t ref) { by_kind_ = ref; }  // neither a '#' node nor a tail leaf

    // A '#' node's stamp: the hash walk (its epoch) that last made it active; 0: none.
    uint32_t stamp() const { return by_kind_; }
    void set_stamp(uint32_t epoch) { by_kind_ = epoch; }

    // Whether the node is a tail leaf, and where its words are in Core::tails_.
    bool is_tail() const { return !is_hash() && (by_kind_ & HAS_TAIL); }
    uint32_t tail_at() const { return by_kind_ & TAIL_AT; }
    void set_tail(uint32_t at) { by_kind_ = HAS_TAIL | at; }
    void clear_tail() { by_kind_ = NO_NODE; }  // no longer a tail leaf (and no '*' child)

   private:
    // One field for what only one kind of node has, read through the accessors above: the
    // '*' child's reference, a '#' node's stamp, or a tail leaf's HAS_TAIL | words offset.
    // A '#' node never has a '*' child (canonical form: '#.*' is written '*.#') and a tail
    // leaf has no child at all, so no node needs two of them, and the node stays 32 bytes.
    uint32_t by_kind_ = NO_NODE;
};
static_assert(sizeof(Node) == 32, "two nodes a cache line");

// A literal edge carries its child's `ids` field too (kept equal by Core::retag): a walk
// that ends on a literal child reads its ids, or the index of its id vector, from the
// edge it probed, not from the node: on a trie larger than the cache, the end node's line
// would be a second dependent miss after the edge's.
struct Edge {
    uint32_t parent;
    uint32_t word;
    uint32_t child;  // tagged reference; NO_NODE: free slot
    uint32_t ids;    // the child's Node::ids
};
static_assert(sizeof(Edge) == 16, "four edges a cache line");

// Edges are keyed by (parent, word id). Fibonacci hashing, the top bits of one multiply:
// the walk computes one per step.
struct EdgeKeys {
    static constexpr size_t MAX_FULL = 3, OF = 4;
    static bool free(const Edge& e) { return e.child == NO_NODE; }
    static Edge free_slot() { return Edge{0, 0, NO_NODE, 0}; }
    static size_t bucket(uint32_t parent, uint32_t word, int shift) {
        const uint64_t key = (static_cast<uint64_t>(parent) << 32) | word;
        return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift);
    }
    static size_t hash(const Edge& e, int shift) { return bucket(e.parent, e.word, shift); }
};
using EdgeTable = OpenTable<Edge, EdgeKeys>;

struct IdSlot {
    uint32_t id;
    uint32_t node;  // EMPTY_SLOT: free slot
    uint32_t text;  // index into the node's texts
    uint32_t pos;   // index into the node's ids
};

// The id table, keyed by subscription id: up to 4/5 full (its slots are read only by
// writes and pattern lookups, never by a walk).
struct IdKeys {
    static constexpr size_t MAX_FULL = 4, OF = 5;
    static bool free(const IdSlot& s) { return s.node == EMPTY_SLOT; }
    static IdSlot free_slot() { return IdSlot{0, EMPTY_SLOT, 0, 0}; }
    static size_t bucket(uint32_t id) {
        return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> 20);
    }
    static size_t hash(const IdSlot& s, int) { return bucket(s.id); }
};
using IdTable = OpenTable<IdSlot, IdKeys>;

struct WordEntry {
    std::string text;
    uint64_t hash = 0;
    uint32_t refs = 0;  // literal edges labelled with this word; 0: the id is free
};

// A result of several end nodes, kept for the next walk that ends on the same nodes.
constexpr uint32_t COMBO_NODES = 8;    // end nodes at most (with ids) in a kept result
constexpr uint32_t COMBO_IDS = 32;     // ids at most in a kept result
// Two-way: a result goes to the first slot of its pair and the pair's previous first moves
// to the second, so that two end sets whose slots collide do not evict each other on every
// match.
constexpr size_t COMBO_SLOTS = 4096;

struct ComboSlot {
    uint64_t version = 0;  // the structure's version it was built against (0: empty)
    uint32_t n = 0;
    uint32_t nodes[COMBO_NODES];
    PyObject* result = nullptr;
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

inline uint64_t tuple_hash(uint32_t shape, const uint32_t* words, size_t n) {
    uint64_t h = shape;
    for (size_t i = 0; i < n; ++i) h = (h ^ words[i]) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 32);  // the table takes low bits: fold in the high ones, which see all
}

// At most 3/4 full: at 1/2 the table's lines are twice as many, and on a machine whose
// shared cache is contended its probes then miss more often.
struct TupleKeys {
    static constexpr size_t MAX_FULL = 3, OF = 4;
    static bool free(const Tuple& t) { return t.shape == 0; }
    static Tuple free_slot() { return Tuple{}; }
    static size_t hash(const Tuple& t, int) { return tuple_hash(t.shape, t.words, t.shape >> 16); }
};
using TupleTable = OpenTable<Tuple, TupleKeys>;

struct WordSlot {
    uint32_t hash32;
    uint32_t id_plus1;  // 0: free slot
    uint64_t key;       // short_key of the word: a short word is found without reading its text
};

// The word table is keyed by the word's bytes; a slot keeps the top half of the word's
// hash, compared before the key or the text.
struct WordKeys {
    static constexpr size_t MAX_FULL = 3, OF = 4;
    static bool free(const WordSlot& s) { return s.id_plus1 == 0; }
    static WordSlot free_slot() { return WordSlot{0, 0, 0}; }
    static size_t hash(const WordSlot& s, int) { return s.hash32; }
};
using WordTable = OpenTable<WordSlot, WordKeys>;

// A result of one end node (the Ids of its ids), kept for the next match ending there
// alone; dropped by a write to the node. Direct-mapped by node: bounded memory however
// many nodes are matched over time.
constexpr size_t CACHED_SLOTS = 1u << 16;

struct CachedSlot {
    uint32_t node_plus1 = 0;  // 0: empty
    PyObject* result = nullptr;
};

// Whether match() consults and fills the kept results (cached_, combos_). They pay when
// most matches find theirs: a hit returns without building anything. When topics are many
// (device ids) most lookups miss, a miss costs a cache line of the table, and the put
// evicts an older result whose object is long out of cache (its reference count is
// written): then the tables cost more than they save. So after a window of WINDOW lookups
// in which fewer than 3 in 4 hit, the tables are passed by for the next BYPASS matches,
// then tried again for a window. Results stay exact either way: a bypassed match builds
// its result, and writes drop kept results whether or not the tables are in use.
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

}  // namespace topicstore
