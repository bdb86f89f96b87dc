// The `walk_layouts` experiment (bench/walk_layouts.py runs it): does the layout of the
// trie decide what a `native` walk costs on the scaled workload, or does the walk's shape?
//
// Three layouts of the same 5-word '*' patterns, each answering every topic with the same
// ids (checked), timed with no Python around them:
//   edge_table  native's own: nodes by index, literal edges in one open-addressing table
//               keyed (parent, word), each carrying its child's ids (matcher/native/),
//               and a level's probes prefetched before they are made;
//   node_blocks each node's literal children packed in one block beside it (word ids, then
//               child references; a leaf child's reference carries its ids), blocks in
//               breadth-first order: the smallest footprint a trie of these patterns has;
//   tuple_space one hash table keyed by (star mask, words): a topic is one probe per mask
//               in use, all independent ("tuple space search", as Open vSwitch classifies):
//               no levels at all.
// Then a random pointer chase over growing arrays: this machine's latency at each size.
//
// Input: argv[1] patterns, argv[2] messages, one per line, words of one digit or '*';
// argv[3] the largest array of the chase, in KiB (0: no chase).
// Output: "layout <name> <ns per topic, all messages> <ns per topic, 100 repeated> <ids>"
// lines, "sizes <MiB of edges> <of blocks> <of tuples>", then "chase <KiB> <ns per load>"
// lines. Exit 1 if the layouts disagree on any topic's ids.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr uint32_t STAR = 10;  // words are the digits 0-9
constexpr uint32_t WORDS = 5;
constexpr uint32_t T_STAR = 1u << 31, T_KIDS = 1u << 30, T_IDS = 1u << 29, T_MANY = 1u << 28;
constexpr uint32_t INDEX = T_MANY - 1;
constexpr uint32_t NONE = 0;

using Topic = std::vector<uint32_t>;

std::vector<Topic> read_lines(const char* path) {
    std::vector<Topic> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        Topic words;
        for (size_t i = 0; i < line.size(); i += 2)
            words.push_back(line[i] == '*' ? STAR : static_cast<uint32_t>(line[i] - '0'));
        if (words.size() != WORDS) {
            std::fprintf(stderr, "not a %u-word line: %s\n", WORDS, line.c_str());
            std::exit(2);
        }
        out.push_back(words);
    }
    return out;
}

// The trie every layout is built from: node 0 the root, kid[10] the '*' child.
struct RefNode {
    uint32_t kid[11] = {};
    std::vector<uint32_t> ids;
    uint32_t depth = 0;
};
std::vector<RefNode> trie(1);
std::vector<uint32_t> created{0};  // node indexes in insertion order

// Ids of a node holding several: a count and where they are (ids_pool).
struct IdList {
    uint32_t at, size;
};
std::vector<IdList> id_lists;
std::vector<uint32_t> ids_pool;

uint32_t tags(uint32_t i) {
    const RefNode& n = trie[i];
    uint32_t t = n.kid[STAR] ? T_STAR : 0;
    for (uint32_t w = 0; w < STAR; ++w)
        if (n.kid[w]) t |= T_KIDS;
    if (!n.ids.empty()) t |= T_IDS;
    if (n.ids.size() > 1) t |= T_MANY;
    return t;
}

// One id itself, or the index of its IdList.
uint32_t ids_field(const std::vector<uint32_t>& ids) {
    if (ids.size() == 1) return ids[0];
    if (ids.empty()) return 0;
    id_lists.push_back({static_cast<uint32_t>(ids_pool.size()), static_cast<uint32_t>(ids.size())});
    ids_pool.insert(ids_pool.end(), ids.begin(), ids.end());
    return static_cast<uint32_t>(id_lists.size() - 1);
}

size_t emit(uint32_t ref, uint32_t ids, uint32_t* out) {
    if (!(ref & T_MANY)) {
        out[0] = ids;
        return 1;
    }
    const IdList& l = id_lists[ids];
    std::memcpy(out, &ids_pool[l.at], l.size * sizeof(uint32_t));
    return l.size;
}

uint32_t level_buf[2][256], ends_ids[256];

// The ids of a walk's `count` ends (their ids fields in ends_ids) into `out`; their number.
size_t emit_ends(const uint32_t* level, size_t count, uint32_t* out) {
    size_t total = 0;
    for (size_t j = 0; j < count; ++j) total += emit(level[j], ends_ids[j], out + total);
    return total;
}
using Walk = size_t (*)(const uint32_t*, uint32_t*);

// -- edge_table ----------------------------------------------------------------------------
struct Node {
    uint32_t star, hash, parent, label, nkids, texts, nids, ids;  // 32 bytes, as native's
};
struct Edge {
    uint32_t parent, word, child, ids;
};
std::vector<Node> nodes;
std::vector<Edge> edges;
int edge_shift;
size_t edge_mask;

size_t bucket(uint32_t parent, uint32_t word) {
    uint64_t key = (static_cast<uint64_t>(parent) << 32) | word;
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> edge_shift);
}

const Edge* probe(uint32_t parent, uint32_t word) {
    for (size_t i = bucket(parent, word) & edge_mask;; i = (i + 1) & edge_mask) {
        const Edge* e = &edges[i];
        if (e->child == NONE || (e->parent == parent && e->word == word)) return e;
    }
}

void build_edge_table() {
    std::vector<uint32_t> index(trie.size());
    for (size_t i = 0; i < created.size(); ++i) index[created[i]] = static_cast<uint32_t>(i);
    size_t count = 0;
    for (const RefNode& n : trie)
        for (uint32_t w = 0; w < STAR; ++w) count += n.kid[w] != 0;
    size_t size = 16;
    edge_shift = 60;
    while ((count + 1) * 4 > size * 3) {  // native's bound: grow past 75% full
        size *= 2;
        --edge_shift;
    }
    edges.assign(size, Edge{0, 0, NONE, 0});
    edge_mask = size - 1;
    nodes.assign(trie.size(), Node{});
    for (uint32_t r : created) {
        const RefNode& n = trie[r];
        Node& node = nodes[index[r]];
        node.ids = ids_field(n.ids);
        if (n.kid[STAR]) node.star = index[n.kid[STAR]] | tags(n.kid[STAR]);
        for (uint32_t w = 0; w < STAR; ++w) {
            if (!n.kid[w]) continue;
            size_t i = bucket(index[r], w) & edge_mask;
            while (edges[i].child != NONE) i = (i + 1) & edge_mask;
            edges[i] = Edge{index[r], w, index[n.kid[w]] | tags(n.kid[w]), 0};
        }
    }
    for (Edge& e : edges)
        if (e.child != NONE) e.ids = nodes[e.child & INDEX].ids;
}

size_t walk_edge_table(const uint32_t* words, uint32_t* out) {
    uint32_t* level = level_buf[0];
    size_t count = 1;
    level[0] = tags(0);
    int at = 0;
    for (uint32_t i = 0; i < WORDS; ++i) {
        uint32_t* next = level_buf[at ^ 1];
        size_t m = 0;
        const uint32_t w = words[i];
        if (count > 1)
            for (size_t j = 0; j < count; ++j) {
                if (level[j] & T_KIDS) __builtin_prefetch(&edges[bucket(level[j] & INDEX, w) & edge_mask]);
                if (level[j] & T_STAR) __builtin_prefetch(&nodes[level[j] & INDEX]);
            }
        const bool last = i + 1 == WORDS;
        auto keep = [&](uint32_t c, const uint32_t* ids) {  // ids read only if kept
            if (last ? (c & T_IDS) != 0 : (c & (T_KIDS | T_STAR)) != 0) {
                next[m] = c;
                ends_ids[m++] = *ids;
            }
        };
        for (size_t j = 0; j < count; ++j) {
            const uint32_t ref = level[j];
            if (ref & T_KIDS) {
                const Edge* e = probe(ref & INDEX, w);
                keep(e->child, &e->ids);
            }
            if (ref & T_STAR) {
                const uint32_t c = nodes[ref & INDEX].star;
                keep(c, &nodes[c & INDEX].ids);
            }
        }
        at ^= 1;
        level = next;
        count = m;
        if (count == 0) return 0;
    }
    return emit_ends(level, count, out);
}

// -- node_blocks ---------------------------------------------------------------------------
// A block: [star reference, kid count, word ids..., child references...]; a child with
// children is referenced by its block's offset, a leaf by its ids (T_IDS, T_MANY say which).
std::vector<uint32_t> blocks;

void build_node_blocks() {
    std::vector<uint32_t> order(created);
    std::stable_sort(order.begin(), order.end(),
                     [](uint32_t a, uint32_t b) { return trie[a].depth < trie[b].depth; });
    std::vector<uint32_t> offset(trie.size(), 0);
    size_t size = 0;
    auto inner = [](uint32_t r) { return (tags(r) & (T_KIDS | T_STAR)) != 0; };
    auto kids = [](uint32_t r) {
        uint32_t k = 0;
        for (uint32_t w = 0; w < STAR; ++w) k += trie[r].kid[w] != 0;
        return k;
    };
    for (uint32_t r : order)
        if (inner(r)) {
            offset[r] = static_cast<uint32_t>(size);
            size += 2 + 2 * kids(r);
        }
    blocks.assign(size, 0);
    auto ref = [&](uint32_t c) {
        return inner(c) ? offset[c] | tags(c) : tags(c) | ids_field(trie[c].ids);
    };
    for (uint32_t r : order) {
        if (!inner(r)) continue;
        uint32_t* b = &blocks[offset[r]];
        const uint32_t k = kids(r);
        b[0] = trie[r].kid[STAR] ? ref(trie[r].kid[STAR]) : 0;
        b[1] = k;
        uint32_t j = 0;
        for (uint32_t w = 0; w < STAR; ++w)
            if (trie[r].kid[w]) {
                b[2 + j] = w;
                b[2 + k + j] = ref(trie[r].kid[w]);
                ++j;
            }
    }
}

size_t walk_node_blocks(const uint32_t* words, uint32_t* out) {
    uint32_t* level = level_buf[0];
    size_t count = 1;
    level[0] = tags(0);  // the root's block is at offset 0
    int at = 0;
    for (uint32_t i = 0; i < WORDS; ++i) {
        uint32_t* next = level_buf[at ^ 1];
        size_t m = 0;
        const uint32_t w = words[i];
        const bool last = i + 1 == WORDS;
        if (count > 1)
            for (size_t j = 0; j < count; ++j) __builtin_prefetch(&blocks[level[j] & INDEX]);
        auto keep = [&](uint32_t c) {
            if (last ? (c & T_IDS) != 0 : (c & (T_KIDS | T_STAR)) != 0) {
                next[m] = c;
                ends_ids[m++] = c & INDEX;
            }
        };
        for (size_t j = 0; j < count; ++j) {
            const uint32_t ref = level[j];
            const uint32_t* b = &blocks[ref & INDEX];
            if (ref & T_KIDS) {
                const uint32_t k = b[1];
                for (uint32_t q = 0; q < k; ++q)
                    if (b[2 + q] == w) {
                        keep(b[2 + k + q]);
                        break;
                    }
            }
            if (ref & T_STAR) keep(b[0]);
        }
        at ^= 1;
        level = next;
        count = m;
        if (count == 0) return 0;
    }
    return emit_ends(level, count, out);
}

// -- tuple_space ---------------------------------------------------------------------------
struct Tuple {
    uint32_t mask;  // bit i: word i is '*'; FREE_TUPLE: an empty slot
    uint32_t words[WORDS];
    uint32_t ref, ids;
};
constexpr uint32_t FREE_TUPLE = 0xFFFFFFFFu;
std::vector<Tuple> tuples;
size_t tuple_mask;
std::vector<uint32_t> masks;  // the masks in use

uint64_t tuple_hash(uint32_t mask, const uint32_t* words) {
    uint64_t h = mask * 0x9E3779B97F4A7C15ULL;
    for (uint32_t i = 0; i < WORDS; ++i)
        h = (h ^ ((mask >> i) & 1 ? STAR : words[i])) * 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

void build_tuple_space(const std::vector<Topic>& patterns) {
    std::map<std::pair<uint32_t, Topic>, std::vector<uint32_t>> groups;
    for (uint32_t id = 0; id < patterns.size(); ++id) {
        uint32_t mask = 0;
        for (uint32_t i = 0; i < WORDS; ++i)
            if (patterns[id][i] == STAR) mask |= 1u << i;
        groups[{mask, patterns[id]}].push_back(id);
    }
    size_t size = 16;
    while (groups.size() * 2 > size) size *= 2;
    tuples.assign(size, Tuple{FREE_TUPLE, {}, 0, 0});
    tuple_mask = size - 1;
    for (const auto& [key, ids] : groups) {
        const uint32_t mask = key.first;
        if (std::find(masks.begin(), masks.end(), mask) == masks.end()) masks.push_back(mask);
        size_t i = tuple_hash(mask, key.second.data()) & tuple_mask;
        while (tuples[i].mask != FREE_TUPLE) i = (i + 1) & tuple_mask;
        Tuple& t = tuples[i];
        t.mask = mask;
        std::copy(key.second.begin(), key.second.end(), t.words);
        t.ref = T_IDS | (ids.size() > 1 ? T_MANY : 0);
        t.ids = ids_field(ids);
    }
}

size_t walk_tuple_space(const uint32_t* words, uint32_t* out) {
    size_t slot[32];
    uint32_t masked[32][WORDS];
    const size_t n = masks.size();
    for (size_t k = 0; k < n; ++k) {
        for (uint32_t i = 0; i < WORDS; ++i) masked[k][i] = (masks[k] >> i) & 1 ? STAR : words[i];
        slot[k] = tuple_hash(masks[k], words) & tuple_mask;
        __builtin_prefetch(&tuples[slot[k]]);
    }
    size_t m = 0;
    for (size_t k = 0; k < n; ++k)
        for (size_t i = slot[k];; i = (i + 1) & tuple_mask) {
            const Tuple& t = tuples[i];
            if (t.mask == FREE_TUPLE) break;
            if (t.mask == masks[k] && std::memcmp(t.words, masked[k], sizeof t.words) == 0) {
                level_buf[0][m] = t.ref;
                ends_ids[m++] = t.ids;
                break;
            }
        }
    return emit_ends(level_buf[0], m, out);
}

// Whether every layout answers every topic with the same ids (in any order).
bool agree(const std::vector<Topic>& messages) {
    std::vector<uint32_t> want(1 << 16), got(1 << 16);
    for (const Topic& t : messages) {
        size_t n = walk_edge_table(t.data(), want.data());
        std::sort(want.begin(), want.begin() + static_cast<long>(n));
        for (Walk walk : {walk_node_blocks, walk_tuple_space}) {
            size_t k = walk(t.data(), got.data());
            std::sort(got.begin(), got.begin() + static_cast<long>(k));
            if (k != n || !std::equal(want.begin(), want.begin() + static_cast<long>(n), got.begin()))
                return false;
        }
    }
    return true;
}

// -- timing --------------------------------------------------------------------------------
using Walk = size_t (*)(const uint32_t*, uint32_t*);

// Best of 5 passes over `topics` (flat, WORDS each): (ns per topic, ids in one pass).
std::pair<double, size_t> timed(Walk walk, const std::vector<uint32_t>& topics) {
    static std::vector<uint32_t> out(1 << 16);
    const size_t n = topics.size() / WORDS;
    double best = 1e300;
    size_t ids = 0;
    for (int pass = 0; pass < 5; ++pass) {
        auto start = std::chrono::steady_clock::now();
        size_t got = 0;
        for (size_t q = 0; q < n; ++q) got += walk(&topics[q * WORDS], out.data());
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
        best = std::min(best, ns / static_cast<double>(n));
        ids = got;
    }
    return {best, ids};
}

void chase(size_t max_kib) {
    std::mt19937 rng(1);
    for (size_t kib : {32, 256, 1024, 2048, 4096, 8192, 16384, 65536, 262144}) {
        if (kib > max_kib) break;
        const size_t lines = kib * 1024 / 64;
        std::vector<uint64_t> a(lines * 8);
        std::vector<size_t> order(lines);
        for (size_t i = 0; i < lines; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t i = 0; i < lines; ++i) a[order[i] * 8] = order[(i + 1) % lines] * 8;
        size_t p = 0;
        for (size_t i = 0; i < 2 * lines; ++i) p = a[p];  // warm up
        const size_t loads = 10'000'000;
        auto start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < loads; ++i) p = a[p];
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
        std::printf("chase %zu %.1f %zu\n", kib, ns / loads, p & 1);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: walk_layouts PATTERNS MESSAGES CHASE_MAX_KIB\n");
        return 2;
    }
    const std::vector<Topic> patterns = read_lines(argv[1]), messages = read_lines(argv[2]);
    for (uint32_t id = 0; id < patterns.size(); ++id) {
        uint32_t at = 0;
        for (uint32_t i = 0; i < WORDS; ++i) {
            const uint32_t w = patterns[id][i];
            if (!trie[at].kid[w]) {
                trie.push_back(RefNode{});
                trie.back().depth = i + 1;
                trie[at].kid[w] = static_cast<uint32_t>(trie.size() - 1);
                created.push_back(static_cast<uint32_t>(trie.size() - 1));
            }
            at = trie[at].kid[w];
        }
        trie[at].ids.push_back(id);
    }
    build_edge_table();
    build_node_blocks();
    build_tuple_space(patterns);
    if (!agree(messages)) {
        std::fprintf(stderr, "the layouts disagree\n");
        return 1;
    }
    std::vector<uint32_t> all, few;
    for (const Topic& t : messages) all.insert(all.end(), t.begin(), t.end());
    for (size_t k = 0; k < messages.size(); ++k) {
        const Topic& t = messages[k % std::min<size_t>(100, messages.size())];
        few.insert(few.end(), t.begin(), t.end());
    }
    const std::pair<const char*, Walk> layouts[] = {
        {"edge_table", walk_edge_table}, {"node_blocks", walk_node_blocks}, {"tuple_space", walk_tuple_space}};
    for (const auto& [name, walk] : layouts) {
        auto [ns_all, ids] = timed(walk, all);
        auto [ns_few, few_ids] = timed(walk, few);
        (void)few_ids;
        std::printf("layout %s %.1f %.1f %zu\n", name, ns_all, ns_few, ids);
    }
    std::printf("sizes %.2f %.2f %.2f\n", edges.size() * sizeof(Edge) / 1048576.0,
                blocks.size() * 4 / 1048576.0, tuples.size() * sizeof(Tuple) / 1048576.0);
    chase(std::strtoull(argv[3], nullptr, 10));
    return 0;
}
