// The vocabulary of the `native` core: node references and their tags, token kinds, the
// hash functions, and the small types a walk passes around.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
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

// Topic words are short: these helpers stay inline, byte loops below 8 bytes, where a
// library memcpy/memcmp call per word would cost more than the bytes it moves.
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

// An allocator whose resize() leaves new entries uninitialized: the walks' scratch lists
// are grown to room for a level and then written, so zero-filling them first would write
// every entry twice.
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

}  // namespace topicstore
