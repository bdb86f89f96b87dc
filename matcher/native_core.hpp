// The `native` engine's storage and walk: the algorithm of matcher/trie.py in C++.
//
// Nodes live in one vector and refer to each other by 32-bit index (0 is the root, so 0
// also means "no such node" in a star/hash/child field: the root is nobody's child). Words
// are interned to 32-bit ids; literal edges are one open-addressing table keyed by
// (parent, word id), so a step of the walk is a multiply, a mask and a compare of integers.
// The id -> (node, pattern text) table is native too: nothing per subscription is a Python
// object.
//
// Thread safety is the caller's (matcher/_native.pyx): every method runs start to end
// holding the GIL and calls no Python code, so no reader ever sees a half-applied write.
// The only Python calls are Py_INCREF/Py_XDECREF of the cached per-node results (frozensets
// of ints, whose deallocation runs no Python code).
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace topicstore {

constexpr uint32_t NO_NODE = 0;             // in star/hash/child fields (the root is index 0)
constexpr uint32_t EMPTY_SLOT = 0xFFFFFFFFu;  // id table: free slot
constexpr uint32_t UNKNOWN_WORD = 0xFFFFFFFFu;  // a topic word no pattern names
constexpr uint32_t STAR = 0xFFFFFFFEu;        // token / edge label of '*'
constexpr uint32_t HASH = 0xFFFFFFFDu;        // token / edge label of '#'

inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

inline uint64_t hash_bytes(const char* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(n) * 0xbf58476d1ce4e5b9ULL);
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = (h ^ v) * 0x94d049bb133111ebULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return mix64(h ^ v);
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

struct Text {
    std::string text;
    uint32_t refs;
};

struct Node {
    uint32_t star = NO_NODE;
    uint32_t hash = NO_NODE;
    uint32_t parent = 0;
    uint32_t label = 0;      // the edge from the parent: a word id, STAR or HASH
    uint32_t nchildren = 0;  // literal edges out
    uint32_t stamp = 0;      // the hash walk that last made this '#' node active
    bool is_hash = false;
    bool live = false;
    std::vector<uint32_t> ids;        // subscriptions ending here; ids[pos] per the id table
    std::vector<Text>* texts = nullptr;  // distinct pattern texts of those ids (usually one)
    PyObject* cached = nullptr;       // frozenset(ids), built on a match, cleared on write

    bool empty() const { return ids.empty() && nchildren == 0 && star == NO_NODE && hash == NO_NODE; }
};

struct Edge {
    uint32_t parent;
    uint32_t word;
    uint32_t child;  // NO_NODE: free slot
};

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

struct WordSlot {
    uint32_t hash32;
    uint32_t id_plus1;  // 0: free slot
};

class Core {
   public:
    Core() {
        nodes_.emplace_back();
        nodes_[0].live = true;
        edges_.assign(16, Edge{0, 0, NO_NODE});
        idslots_.assign(16, IdSlot{0, EMPTY_SLOT, 0, 0});
        wordslots_.assign(16, WordSlot{0, 0});
    }
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;
    ~Core() {
        for (Node& n : nodes_) {
            Py_XDECREF(n.cached);
            delete n.texts;
        }
    }

    // -- reads -----------------------------------------------------------------------------

    uint32_t size() const { return id_count_; }
    uint32_t node_count() const { return node_count_; }
    uint32_t hash_count() const { return hash_count_; }
    uint64_t version() const { return version_; }
    const Node& node(uint32_t i) const { return nodes_[i]; }
    Node& node_mut(uint32_t i) { return nodes_[i]; }

    // The pattern text of `id`, or nullptr.
    const std::string* pattern_of(uint32_t id) const {
        const IdSlot* s = find_id(id);
        if (s == nullptr) return nullptr;
        return &(*nodes_[s->node].texts)[s->text].text;
    }

    // Every (id, text), in table order.
    template <class F>
    void for_each_id(F&& f) const {
        for (const IdSlot& s : idslots_)
            if (s.node != EMPTY_SLOT) f(s.id, (*nodes_[s.node].texts)[s.text].text);
    }

    uint32_t word_id(const char* p, uint32_t n) const {
        uint64_t h = hash_bytes(p, n);
        uint32_t h32 = static_cast<uint32_t>(h >> 32);
        size_t mask = wordslots_.size() - 1;
        for (size_t i = h32 & mask;; i = (i + 1) & mask) {
            const WordSlot& s = wordslots_[i];
            if (s.id_plus1 == 0) return UNKNOWN_WORD;
            if (s.hash32 == h32) {
                const std::string& w = words_[s.id_plus1 - 1].text;
                if (w.size() == n && std::memcmp(w.data(), p, n) == 0) return s.id_plus1 - 1;
            }
        }
    }

    uint32_t child(uint32_t parent, uint32_t word) const {
        size_t mask = edges_.size() - 1;
        for (size_t i = edge_bucket(parent, word) & mask;; i = (i + 1) & mask) {
            const Edge& e = edges_[i];
            if (e.child == NO_NODE) return NO_NODE;
            if (e.parent == parent && e.word == word) return e.child;
        }
    }

    // Nodes reachable after consuming `words` (ids from word_id), into `out`: the walk of
    // matcher/trie.py. `level_sizes`, when not null, receives the nodes live at each level
    // (the bound checked by the tests: at most node_count() each).
    void walk(const uint32_t* words, size_t n, std::vector<uint32_t>& out,
              std::vector<uint32_t>* level_sizes) {
        out.clear();
        if (hash_count_ == 0 && level_sizes == nullptr) {
            plain_walk(words, n, out);
            return;
        }
        hash_walk(words, n, out, level_sizes);
    }

    // -- writes (the caller holds the write lock and has validated everything) -------------

    // Returns false when `id` is already subscribed (the caller checks that first).
    bool add(uint32_t id, const Token* tokens, size_t ntokens, const char* text, size_t tlen) {
        if (find_id(id) != nullptr) return false;
        ++version_;
        uint32_t cur = 0;
        for (size_t i = 0; i < ntokens; ++i) {
            const Token& t = tokens[i];
            uint32_t next;
            if (t.kind == STAR) {
                next = nodes_[cur].star;
                if (next == NO_NODE) {
                    next = new_node(cur, STAR, false);
                    nodes_[cur].star = next;
                }
            } else if (t.kind == HASH) {
                next = nodes_[cur].hash;
                if (next == NO_NODE) {
                    next = new_node(cur, HASH, true);
                    nodes_[cur].hash = next;
                    ++hash_count_;
                }
            } else {
                uint32_t w = intern(t.data, t.size);
                next = child(cur, w);
                if (next == NO_NODE) {
                    next = new_node(cur, w, false);
                    ++words_[w].refs;
                    insert_edge(cur, w, next);
                    ++nodes_[cur].nchildren;
                }
            }
            cur = next;
        }
        Node& leaf = nodes_[cur];
        if (leaf.texts == nullptr) leaf.texts = new std::vector<Text>();
        uint32_t ti = 0, free_ti = UINT32_MAX;
        std::vector<Text>& texts = *leaf.texts;
        for (; ti < texts.size(); ++ti) {
            if (texts[ti].refs == 0) {
                if (free_ti == UINT32_MAX) free_ti = ti;
            } else if (texts[ti].text.size() == tlen &&
                       std::memcmp(texts[ti].text.data(), text, tlen) == 0) {
                break;
            }
        }
        if (ti == texts.size()) {
            if (free_ti != UINT32_MAX) {
                ti = free_ti;
                texts[ti].text.assign(text, tlen);
            } else {
                texts.push_back(Text{std::string(text, tlen), 0});
            }
        }
        ++texts[ti].refs;
        insert_id(id, cur, ti, static_cast<uint32_t>(leaf.ids.size()));
        leaf.ids.push_back(id);
        Py_CLEAR(leaf.cached);
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
        uint32_t last = leaf.ids.back();
        leaf.ids[pos] = last;
        leaf.ids.pop_back();
        if (last != id) find_id(last)->pos = pos;
        Py_CLEAR(leaf.cached);
        Text& t = (*leaf.texts)[ti];
        if (--t.refs == 0) std::string().swap(t.text);
        if (leaf.ids.empty()) {
            delete leaf.texts;
            leaf.texts = nullptr;
            std::vector<uint32_t>().swap(leaf.ids);
        } else if (leaf.ids.size() * 4 < leaf.ids.capacity()) {
            leaf.ids.shrink_to_fit();
        }
        // Prune nodes left empty, bottom-up (the root stays).
        while (cur != 0 && nodes_[cur].empty()) {
            Node& n = nodes_[cur];
            uint32_t parent = n.parent;
            Node& p = nodes_[parent];
            if (n.label == STAR) {
                p.star = NO_NODE;
            } else if (n.label == HASH) {
                p.hash = NO_NODE;
                --hash_count_;
            } else {
                erase_edge(parent, n.label);
                --p.nchildren;
                release_word(n.label);
            }
            free_node(cur);
            cur = parent;
        }
        return true;
    }

    // An empty string when every invariant holds, else what is broken.
    std::string check() const {
        uint32_t live = 0, hashes = 0, ids = 0;
        for (uint32_t i = 0; i < nodes_.size(); ++i) {
            const Node& n = nodes_[i];
            if (!n.live) {
                if (n.cached || n.texts || !n.ids.empty()) return "freed node holds data";
                continue;
            }
            ++live;
            hashes += n.is_hash;
            ids += static_cast<uint32_t>(n.ids.size());
            if (i != 0 && n.empty()) return "unpruned empty node";
            if (n.is_hash && (n.star != NO_NODE || n.hash != NO_NODE)) return "non-canonical";
            if (n.hash != NO_NODE && !nodes_[n.hash].is_hash) return "hash edge to a non-# node";
            if (n.ids.empty() != (n.texts == nullptr)) return "texts without ids";
            if (n.star != NO_NODE && (nodes_[n.star].parent != i || nodes_[n.star].label != STAR))
                return "star child's parent link";
            if (n.hash != NO_NODE && (nodes_[n.hash].parent != i || nodes_[n.hash].label != HASH))
                return "hash child's parent link";
            if (i != 0) {
                const Node& p = nodes_[n.parent];
                if (!p.live) return "dead parent";
                if (n.label == STAR ? p.star != i
                    : n.label == HASH ? p.hash != i
                                      : child(n.parent, n.label) != i)
                    return "parent does not lead here";
            }
            if (n.texts) {
                std::vector<uint32_t> refs(n.texts->size(), 0);
                for (size_t pos = 0; pos < n.ids.size(); ++pos) {
                    const IdSlot* s = find_id(n.ids[pos]);
                    if (s == nullptr || s->node != i || s->pos != pos) return "id table mismatch";
                    ++refs[s->text];
                }
                for (size_t t = 0; t < refs.size(); ++t)
                    if (refs[t] != (*n.texts)[t].refs) return "text refcount";
            }
            if (n.cached != nullptr && static_cast<size_t>(PySet_GET_SIZE(n.cached)) != n.ids.size())
                return "stale cached result";
        }
        if (live != node_count_) return "node count";
        if (hashes != hash_count_) return "hash count";
        if (ids != id_count_) return "id count";
        uint32_t edges = 0;
        std::vector<uint32_t> children(nodes_.size(), 0), wrefs(words_.size(), 0);
        for (const Edge& e : edges_) {
            if (e.child == NO_NODE) continue;
            ++edges;
            if (!nodes_[e.child].live || nodes_[e.child].parent != e.parent) return "edge target";
            if (e.word >= words_.size() || words_[e.word].refs == 0) return "edge word";
            ++children[e.parent];
            ++wrefs[e.word];
        }
        if (edges != edge_count_) return "edge count";
        for (uint32_t i = 0; i < nodes_.size(); ++i)
            if (nodes_[i].live && children[i] != nodes_[i].nchildren) return "child count";
        uint32_t words = 0;
        for (uint32_t w = 0; w < words_.size(); ++w) {
            if (wrefs[w] != words_[w].refs) return "word refcount";
            if (words_[w].refs) {
                ++words;
                if (word_id(words_[w].text.data(), static_cast<uint32_t>(words_[w].text.size())) != w)
                    return "word table";
            }
        }
        if (words != word_count_) return "word count";
        return "";
    }

   private:
    std::vector<Node> nodes_;
    std::vector<uint32_t> free_nodes_;
    std::vector<Edge> edges_;
    std::vector<IdSlot> idslots_;
    std::vector<WordEntry> words_;
    std::vector<uint32_t> free_words_;
    std::vector<WordSlot> wordslots_;
    uint32_t node_count_ = 1, hash_count_ = 0, id_count_ = 0, edge_count_ = 0, word_count_ = 0;
    uint32_t epoch_ = 0;
    uint64_t version_ = 0;
    // Scratch of the '#' walk (reused: walks never overlap, see the header comment).
    std::vector<uint32_t> level_, next_, active_, slot_of_, slot_word_, head_;
    std::vector<std::pair<uint32_t, uint32_t>> entries_;  // (node, next entry) per slot list

    static size_t edge_bucket(uint32_t parent, uint32_t word) {
        return static_cast<size_t>(mix64((static_cast<uint64_t>(parent) << 32) | word));
    }
    static size_t id_bucket(uint32_t id) {
        return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> 20);
    }

    void plain_walk(const uint32_t* words, size_t n, std::vector<uint32_t>& out) {
        // Without '#' there are no loops and every node has one parent edge, so a level
        // holds each node at most once.
        std::vector<uint32_t>& level = level_;
        std::vector<uint32_t>& next = next_;
        level.clear();
        level.push_back(0);
        for (size_t i = 0; i < n; ++i) {
            uint32_t w = words[i];
            next.clear();
            for (uint32_t node : level) {
                if (w != UNKNOWN_WORD) {
                    uint32_t c = child(node, w);
                    if (c != NO_NODE) next.push_back(c);
                }
                uint32_t s = nodes_[node].star;
                if (s != NO_NODE) next.push_back(s);
            }
            if (next.empty()) return;
            level.swap(next);
        }
        out.assign(level.begin(), level.end());
    }

    // A reached '#' node stays active at every later position, so it is set aside (stamped
    // with this walk's epoch, so it enters once) and its literal edges for the topic's
    // distinct words are indexed per word: a level costs the nodes that match its word.
    // Each node is processed at most once per level: nodes x (words + 1) steps at most.
    void reach(const std::vector<uint32_t>& from) {
        for (uint32_t node : from) {
            uint32_t h = nodes_[node].hash;
            if (h == NO_NODE || nodes_[h].stamp == epoch_) continue;
            nodes_[h].stamp = epoch_;
            active_.push_back(h);
            if (nodes_[h].nchildren == 0) continue;
            for (uint32_t slot = 0; slot < slot_word_.size(); ++slot) {
                uint32_t c = child(h, slot_word_[slot]);
                if (c != NO_NODE) {
                    entries_.emplace_back(c, head_[slot]);
                    head_[slot] = static_cast<uint32_t>(entries_.size() - 1);
                }
            }
        }
    }

    void hash_walk(const uint32_t* words, size_t n, std::vector<uint32_t>& out,
                   std::vector<uint32_t>* level_sizes) {
        if (++epoch_ == 0) {  // wrapped: forget every stamp
            for (Node& node : nodes_) node.stamp = 0;
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
        head_.assign(slot_word_.size(), UINT32_MAX);
        entries_.clear();
        active_.clear();
        std::vector<uint32_t>& level = level_;
        std::vector<uint32_t>& next = next_;
        level.clear();
        level.push_back(0);
        reach(level);
        if (level_sizes) level_sizes->push_back(static_cast<uint32_t>(level.size() + active_.size()));
        for (size_t i = 0; i < n; ++i) {
            uint32_t w = words[i];
            next.clear();
            for (uint32_t node : level) {
                if (w != UNKNOWN_WORD) {
                    uint32_t c = child(node, w);
                    if (c != NO_NODE) next.push_back(c);
                }
                uint32_t s = nodes_[node].star;
                if (s != NO_NODE) next.push_back(s);
            }
            if (slot_of_[i] != UINT32_MAX)
                for (uint32_t e = head_[slot_of_[i]]; e != UINT32_MAX; e = entries_[e].second)
                    next.push_back(entries_[e].first);
            reach(next);
            if (level_sizes)
                level_sizes->push_back(static_cast<uint32_t>(next.size() + active_.size()));
            level.swap(next);
            if (level.empty() && active_.empty()) return;
        }
        out.assign(level.begin(), level.end());
        out.insert(out.end(), active_.begin(), active_.end());
    }

    uint32_t new_node(uint32_t parent, uint32_t label, bool is_hash) {
        uint32_t i;
        if (!free_nodes_.empty()) {
            i = free_nodes_.back();
            free_nodes_.pop_back();
        } else {
            i = static_cast<uint32_t>(nodes_.size());
            nodes_.emplace_back();
        }
        Node& n = nodes_[i];
        n.parent = parent;
        n.label = label;
        n.is_hash = is_hash;
        n.live = true;
        ++node_count_;
        return i;
    }

    void free_node(uint32_t i) {
        Node& n = nodes_[i];
        if (n.is_hash) n.stamp = 0;
        n = Node();
        free_nodes_.push_back(i);
        --node_count_;
    }

    // -- words -------------------------------------------------------------------------------

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
        wordslots_[i] = WordSlot{h32, w + 1};
    }

    void grow_words() {
        std::vector<WordSlot> old;
        old.swap(wordslots_);
        wordslots_.assign(old.size() * 2, WordSlot{0, 0});
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
        wordslots_[i] = WordSlot{0, 0};
        std::string().swap(words_[w].text);
        free_words_.push_back(w);
        --word_count_;
    }

    // -- edges -------------------------------------------------------------------------------

    void insert_edge(uint32_t parent, uint32_t word, uint32_t c) {
        if ((edge_count_ + 1) * 4 > edges_.size() * 3) {
            std::vector<Edge> old;
            old.swap(edges_);
            edges_.assign(old.size() * 2, Edge{0, 0, NO_NODE});
            for (const Edge& e : old)
                if (e.child != NO_NODE) place_edge(e);
        }
        place_edge(Edge{parent, word, c});
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
        edges_[i] = Edge{0, 0, NO_NODE};
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
