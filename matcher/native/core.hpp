// The `native` engine's structure: class Core, the algorithm of matcher/trie.py in C++.
//
// Nodes live in one vector and refer to each other by 32-bit references: the node's index
// (0 is the root, so 0 also means "no such node": the root is nobody's child) tagged with
// what that node has (a '*' child, a '#' child, ids, ...: see base.hpp). The walk reads a
// node only when a tag says there is something to read there; the common step is one probe
// of the edge table, and a miss in cache there is what a step costs. Words are interned to
// 32-bit ids (words.hpp); literal edges are one open-addressing table keyed by (parent,
// word id), so a step of the walk is a multiply, a mask and a compare of integers. An edge
// also carries its child's ids field, so a walk ending on a literal child reads its ids
// from the edge it probed, not from the node. The id -> (node, pattern text) table is
// native too: nothing per subscription is a Python object.
//
// Memory: most nodes of a large trie would be single-child chains below the third word. A
// chain of literal words that ends a pattern and has no '#' above it is one "tail leaf"
// (tails.hpp): the node of its first word, holding the rest of the words and the ids; the
// walk compares the topic's remaining words with them at once. A node is 32 bytes (two a
// cache line): what only some nodes need lives beside them (ids past the first in
// idvecs_, results kept per end node in a bounded table, kept.hpp).
//
// Where the code is, by structure: records.hpp (the records the tables hold), words.hpp
// (the word table), texts.hpp (pattern texts), trie.hpp (writes: nodes, edges, ids),
// tails.hpp (tail leaves), tuples.hpp (the tuple index), walk.hpp (the walks), kept.hpp
// (kept results), check.hpp (the invariants).
//
// Thread safety is the caller's (matcher/_native.pyx): every method runs start to end
// holding the GIL or the structure's guard and calls no Python code, so no reader ever
// sees a half-applied write. The only Python calls are Py_INCREF/Py_XDECREF of the kept
// results (Ids of _native.pyx: no Python references, so their deallocation runs no Python
// code).
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base.hpp"
#include "records.hpp"

namespace topicstore {

class Core {
   public:
    Core() {
        nodes_.emplace_back();
        nodes_[0].label = 0;  // the root: live, nobody's child
        hashes_below_.push_back(0);
        tuple_at_.push_back(NO_TUPLE);
    }
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;
    ~Core() {
        for (ComboSlot& c : combos_) Py_XDECREF(c.result);
        for (CachedSlot& c : cached_) Py_XDECREF(c.result);
        for (IdVec& v : idvecs_) v.release();
    }

    // -- reads -----------------------------------------------------------------------------

    uint32_t size() const { return static_cast<uint32_t>(idslots_.count()); }
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

    // -- ids and texts ---------------------------------------------------------------------

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
            if (!IdKeys::free(s)) {
                const char* text = text_of(s, &size);
                f(s.id, text, size);
            }
    }

    // -- words (words.hpp) -------------------------------------------------------------------

    uint32_t word_id(const char* p, uint32_t n) const {
        return n < 8 ? short_word_id(pack_short(p, n), n) : long_word_id(p, n);
    }
    size_t word_ids(const char* const* data, const size_t* sizes, size_t n,
                    std::vector<uint32_t>& out) const;
    size_t split_words(const char* data, size_t n, char sep, std::vector<uint32_t>& out) const;

    // -- walks (walk.hpp, tuples.hpp) --------------------------------------------------------

    uint32_t child(uint32_t parent, uint32_t word) const {
        return probe(edges_.data(), edges_.mask(), parent, word)->child;
    }
    uint32_t tags(uint32_t i) const;

    // Tagged references to the nodes reachable after consuming `words` (ids from word_id):
    // the walk of matcher/trie.py. They are scratch, valid until the next walk.
    // `level_sizes`, when not null, receives the nodes live at each level (the bound the
    // tests check: at most node_count() each).
    Ends walk(const uint32_t* words, size_t n, std::vector<uint32_t>* level_sizes) {
        if (level_sizes == nullptr && answers_by_tuples(n)) return tuple_walk(words, n);
        if (hash_count_ == 0 && level_sizes == nullptr) return plain_walk(words, n);
        return hash_walk(words, n, level_sizes);
    }

    // -- kept results (kept.hpp) -------------------------------------------------------------

    ResultGate& result_gate() { return gate_; }
    PyObject* cached(uint32_t i) const;
    void keep_cached(uint32_t i, PyObject* result);
    PyObject* combo_get(const uint32_t* nodes, uint32_t n) const;
    void combo_put(const uint32_t* nodes, uint32_t n, uint64_t version, PyObject* result);

    // -- writes (trie.hpp; the caller holds the write lock and has validated everything) ---

    bool add(uint32_t id, const Token* tokens, size_t ntokens, const char* text, size_t tlen);
    bool remove(uint32_t id);

    // An empty string when every invariant holds, else what is broken (check.hpp).
    std::string check() const;

   private:
    // -- state -------------------------------------------------------------------------------

    std::vector<Text> texts_;
    uint32_t free_text_ = NO_TEXT;
    std::string arena_;   // every live text's bytes, and garbage_ bytes of removed ones
    mutable std::string text_scratch_;  // pattern_of's answer when it is a path text
    size_t garbage_ = 0;
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
    EdgeTable edges_;
    IdTable idslots_;
    std::vector<WordEntry> words_;
    std::vector<uint32_t> free_words_;
    WordTable wordslots_;
    // The tuple index (see tuple_walk): its table, each node's slot in it (or NO_TUPLE /
    // UNTUPLED), the end nodes it cannot hold, and per pattern length the shapes in use
    // with their entry counts.
    TupleTable tuples_;
    std::vector<uint32_t> tuple_at_;
    uint32_t untupled_ = 0;
    bool tuples_on_ = true;  // see settle_tuples
    std::vector<std::pair<uint32_t, uint32_t>> shapes_[TUPLE_WORDS + 1];
    uint32_t node_count_ = 1, hash_count_ = 0;
    uint32_t epoch_ = 0;
    uint32_t root_ref_ = 0;  // tags(0), kept by retag(0): where every walk starts
    uint64_t version_ = 1;
    std::vector<ComboSlot> combos_;  // allocated on the first walk that ends on several nodes
    // Scratch of the '#' walk (reused: walks never overlap, see the header comment).
    Scratch level_, next_;
    Scratch end_ids_;  // the ends' Node::ids (Ends::ids)
    Scratch reaching_;  // hash_walk: a level's stepped entries with a '#' child
    std::vector<uint32_t> active_, slot_of_, slot_word_, reached_, memo_touched_;
    std::vector<std::vector<uint32_t>> by_word_;  // per slot: children of active '#' nodes
    static constexpr size_t SCRATCH = 256;  // first '#' walk: room per list up front
    static constexpr size_t MEMO_SLOTS = 16;  // distinct topic words the memo table covers
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
    std::vector<Memo> memo_;
    struct ActiveBelow {  // trivial: active_below_ grows by memset (see grow_active_below)
        uint32_t epoch;   // the walk it counts for (0: none)
        uint32_t active;  // '#' nodes below the node made active in that walk's pruned part
    };
    // Per node, grown by pruned walks: see spent().
    std::vector<ActiveBelow, NoInit<ActiveBelow>> active_below_;
    bool counting_ = false;  // hash_walk: activations are counted (its pruned part)

    // -- hashing -----------------------------------------------------------------------------

    size_t edge_bucket(uint32_t parent, uint32_t word) const {
        return EdgeKeys::bucket(parent, word, edges_.shift());
    }
    static size_t combo_bucket(const uint32_t* nodes, uint32_t n) {
        uint64_t h = n;
        for (uint32_t i = 0; i < n; ++i) h = mix64(h ^ (static_cast<uint64_t>(nodes[i]) << 20));
        return static_cast<size_t>(h & (COMBO_SLOTS - 2));  // a pair's first slot
    }
    static size_t cached_bucket(uint32_t node) {
        return static_cast<size_t>((static_cast<uint64_t>(node) * 0x9E3779B97F4A7C15ULL) >> 48);
    }
    // Shapes past which a topic length is walked, not looked up: each is one probe.
    static constexpr size_t MAX_SHAPES = 8;

    // -- texts (texts.hpp) -------------------------------------------------------------------

    uint32_t new_text(const char* text, size_t tlen);
    static bool is_path_text(const Token* tokens, size_t ntokens, const char* text, size_t tlen);
    std::string path_text(uint32_t i) const;
    const char* text_of(const IdSlot& s, uint32_t* size) const;
    void drop_text(Node& leaf, uint32_t ti);
    void compact_arena();

    // -- words (words.hpp) -------------------------------------------------------------------

    uint32_t short_word_id(uint64_t packed, uint32_t n) const;
    uint32_t long_word_id(const char* p, uint32_t n) const;
    uint32_t word_at(const char* p, size_t n, uint64_t packed) const;
    uint32_t intern(const char* p, uint32_t size);
    void release_word(uint32_t w);

    // -- the trie (trie.hpp) -----------------------------------------------------------------

    void retag(uint32_t i);
    uint32_t new_node(uint32_t parent, uint32_t label);
    void free_node(uint32_t i);
    uint32_t tail_length(uint32_t leaf) const;
    template <class F>
    void each_above(uint32_t i, F&& f) const;
    void count_pattern(uint32_t leaf, int delta);
    void count_hash(uint32_t h, int delta);
    void push_id(Node& n, uint32_t id);
    uint32_t pop_id(Node& n, uint32_t pos);
    size_t edge_at(uint32_t parent, uint32_t word) const;
    void insert_edge(uint32_t parent, uint32_t word, uint32_t c);
    void erase_edge(uint32_t parent, uint32_t word);
    const IdSlot* find_id(uint32_t id) const;
    IdSlot* find_id(uint32_t id);
    void insert_id(uint32_t id, uint32_t node, uint32_t text, uint32_t pos);
    void erase_id(uint32_t id);

    // -- tail leaves (tails.hpp) -------------------------------------------------------------

    void reach_tail(uint32_t ref, uint32_t pos);
    size_t tails_matched(const uint32_t* words, size_t n, uint32_t* out, size_t count) const;
    bool tail_matches(uint32_t ref, const uint32_t* rest, size_t nrest) const;
    bool same_tail(uint32_t leaf, const Token* tokens, size_t n) const;
    uint32_t new_tail(const Token* tokens, size_t n);
    void unfold(uint32_t leaf);
    void drop_tail(uint32_t i);
    void compact_tails(bool force = false);

    // -- the tuple index (tuples.hpp) --------------------------------------------------------

    Ends tuple_walk(const uint32_t* words, size_t n);
    uint32_t tuple_key(uint32_t i, uint32_t* words, uint32_t* shape) const;
    void sync_tuple(uint32_t i);
    static void count_shape(std::vector<std::pair<uint32_t, uint32_t>>& shapes, uint32_t shape,
                            int delta);
    void place_tuple(const Tuple& t);
    void reserve_tuple();
    void grow_tuples();
    void erase_tuple(uint32_t i);
    void settle_tuples();
    void drop_tuples();
    void build_tuples();
    std::string check_tuples() const;

    // -- the walks (walk.hpp) ----------------------------------------------------------------

    void step(uint32_t ref, uint32_t w, uint32_t keep, Scratch& next) const;
    const Edge* probe(const Edge* edges, size_t mask, uint32_t parent, uint32_t word) const;
    Ends plain_walk(const uint32_t* words, size_t n);
    void prefetch_results(const uint32_t* level, const uint32_t* ids, size_t count) const;
    static uint32_t* room(Scratch& v, size_t need);
    void prefetch_level(const uint32_t* level, size_t count, uint32_t w) const;
    void ids_from_nodes(const uint32_t* level, uint32_t* ids, size_t from, size_t to) const;
    void reach(uint32_t ref);
    void reset_memos();
    void static_step(uint32_t prev, uint32_t len, uint32_t slot, uint32_t w, uint32_t keep,
                     bool prove, Scratch& next);
    bool spent(uint32_t x) const;
    void count_active(uint32_t h);
    void grow_active_below();
    void prepare_hash_walk();
    Ends hash_walk(const uint32_t* words, size_t n, std::vector<uint32_t>* level_sizes);

    // -- kept results (kept.hpp) -------------------------------------------------------------

    static bool same_nodes(const uint32_t* a, const uint32_t* b, uint32_t n);
    void drop_cached(uint32_t i);
};

}  // namespace topicstore
