# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``native``: the ``trie`` engine's algorithm compiled (Cython over ``native/*.hpp``).

Nodes, literal edges, interned words and the id -> (node, pattern text) table are C++
structures indexed by 32-bit integers: a step of the walk compares integers, and no
subscription costs a Python object. Topics are split and their words looked up in C (for
plain ASCII AMQP keys; other topics go through the dialect's validating splitter first).
The walk is ``matcher.trie.walk``'s: breadth-first, reached ``#`` nodes set aside with
their literal edges indexed by word, at most nodes x (words + 1) steps.

Concurrency: the structure has one guard (a ``std::mutex``: taking a free one is one atomic
instruction, where a PyThread lock also reads the clock on 3.11), held by every walk (``match``,
``match_ids``) and every change to the structure, so a reader never sees a half-applied
write, and walks, which use the structure's scratch space, never overlap. ``match`` holds
it with the GIL; ``match_ids`` walks a slice of its topics at a time holding it *without*
the GIL, so other threads' Python code (the event loop, other requests) runs on the other
core meanwhile. Deadlock-free because no thread ever waits for the guard while holding the
GIL (``_enter`` tries, then waits with the GIL released), and the GIL-free sections call no
Python code. Reads that a walk does not touch (sizes, the id -> pattern table) take no
guard: they hold the GIL, which every writer holds for its whole change. ``match`` builds
its result (``Ids``: no Python references, so building it runs no Python code) under the
guard; ``match_ids`` copies ids out before it builds any Python object. Writers
also serialize on the base class's write lock. A free-threaded build without the GIL would
need the guard on those reads too, so importing this module there fails rather than racing.
"""

import sys
from array import array as _array
from collections.abc import Set as _AbstractSet

cimport cython
from cpython cimport array
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcmp, memcpy
from libcpp.mutex cimport mutex
from libcpp.string cimport string
from libcpp.vector cimport vector

from matcher.base import Matcher, check_sub_id, gc_paused
from matcher.errors import CapacityError, MatcherError, SubscriptionConflictError
from matcher.grammar import MANY, ONE, canonical, checked_text

if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
    raise ImportError(
        "matcher._native relies on the GIL to keep readers off half-applied writes; "
        "this interpreter runs without it"
    )


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    void* PyUnicode_DATA(object)
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL


cdef extern from "native/native.hpp" namespace "topicstore":
    cdef uint32_t UNKNOWN_WORD
    cdef uint32_t STAR
    cdef uint32_t HASH
    cdef uint32_t HAS_IDS
    cdef uint32_t INDEX
    cdef uint32_t COMBO_NODES
    cdef uint32_t COMBO_IDS
    cdef uint32_t GATE_WINDOW "topicstore::ResultGate::WINDOW"
    cdef uint32_t GATE_BYPASS "topicstore::ResultGate::BYPASS"
    cdef int ROOM_NODES
    cdef int ROOM_TAILS
    cdef int ROOM_TEXT

    cdef cppclass Token:
        const char* data
        uint32_t size
        uint32_t kind

    cdef cppclass Ends:
        const uint32_t* data
        const uint32_t* ids
        size_t size

    cdef cppclass ResultGate:
        bint open()
        void looked(bint)

    cdef cppclass Core:
        Core() except +
        uint32_t size()
        uint32_t node_count()
        uint32_t hash_count()
        bint answers_by_tuples(size_t)
        uint64_t version()
        uint32_t end_count(const Ends&, size_t)
        const uint32_t* end_ids(const Ends&, size_t)
        ResultGate& result_gate()
        PyObject* cached(uint32_t)
        void keep_cached(uint32_t, PyObject*)
        bint has(uint32_t)
        const char* pattern_of(uint32_t, uint32_t*)
        uint32_t word_id(const char*, uint32_t)
        size_t split_words(const char*, size_t, char, vector[uint32_t]&) except +
        size_t word_ids(const char* const*, const size_t*, size_t, vector[uint32_t]&) except +
        Ends walk(const uint32_t*, size_t, vector[uint32_t]*) except +
        bint add(uint32_t, const Token*, size_t, const char*, size_t) except +
        bint remove(uint32_t) except +
        int room(size_t, size_t, size_t)
        void usage(size_t*)
        void lower_capacity(size_t, size_t, size_t)
        string check() except +
        PyObject* combo_get(const uint32_t*, uint32_t)
        void combo_put(const uint32_t*, uint32_t, uint64_t, PyObject*)


cdef extern from "native/glue.hpp" namespace "topicstore":
    cdef cppclass TopicRef:
        const char* data
        size_t size
        uint32_t first
        uint32_t count
        uint32_t kind

    void topicstore_items "topicstore::items"(const Core&, vector[uint32_t]&,
                                                vector[string]&) except +
    size_t topicstore_sort_ids "topicstore::sort_ids"(uint32_t*, size_t) nogil
    void topicstore_match_refs "topicstore::match_refs"(
        Core&, const TopicRef*, size_t, const char* const*, const size_t*, vector[uint32_t]&,
        vector[uint32_t]&, vector[uint32_t]&) except + nogil


#: Results of up to this many ids are kept per node (built on the first match that ends on
#: the node alone, dropped by any write to it; in a bounded table, see native/kept.hpp), as
#: ``trie`` keeps small frozensets: the common single-node match then returns without
#: building anything. While most lookups miss (many distinct topics) they are passed by
#: (``ResultGate`` in native/records.hpp).
cdef size_t CACHED_MAX = 16
#: Lookups per window of the kept results' gate, and matches a closed gate passes by.
RESULT_GATE_WINDOW = GATE_WINDOW
RESULT_GATE_BYPASS = GATE_BYPASS
#: Topics ``match_ids`` walks per hold of the guard: a writer or a single ``match`` waits
#: for at most one slice (about 0.1 ms of plain walks).
cdef size_t MATCH_SLICE = 256
cdef array.array _UINT32 = _array("I")
#: Ids an ``Ids`` holds in its own object; more take one more allocation.
cdef enum:
    INLINE_IDS = 6


@cython.final
@cython.freelist(64)
cdef class Ids:
    """What ``native``'s ``match`` returns (a ``MatchResult``): the matched ids, distinct and
    ascending, in one C array, so a match builds no Python object per id (a frozenset of
    275 ids cost 13 µs to build, the whole walk 45). An id becomes an ``int`` only when it
    is read. Immutable; equal to a set or frozenset of the same ids and hashed as one;
    ``in`` is a binary search; pickles as a frozenset.

    It holds no Python references (not tracked by the garbage collector), so building or
    freeing one runs no Python code: ``match`` builds it under the guard."""

    cdef uint32_t* ids
    cdef Py_ssize_t n
    cdef Py_hash_t hash_
    cdef uint32_t own[INLINE_IDS]

    def __cinit__(self):
        self.ids = self.own
        self.n = 0
        self.hash_ = -1

    def __dealloc__(self):
        if self.ids != self.own:
            free(self.ids)

    def __len__(self):
        return self.n

    def __iter__(self):
        cdef _IdsIterator it = _IdsIterator.__new__(_IdsIterator)
        it.of = self
        return it

    def __contains__(self, sub_id):
        if not isinstance(sub_id, int) or not 0 <= sub_id < 2**32:
            return False
        cdef uint32_t key = sub_id
        cdef Py_ssize_t lo = 0, hi = self.n, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.ids[mid] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo < self.n and self.ids[lo] == key

    def __eq__(self, other):
        cdef Ids that
        if isinstance(other, Ids):
            that = <Ids>other
            return self.n == that.n and (
                self.n == 0 or memcmp(self.ids, that.ids, self.n * sizeof(uint32_t)) == 0
            )
        if not isinstance(other, _AbstractSet):
            return NotImplemented
        if len(other) != self.n:
            return False
        cdef Py_ssize_t i
        for i in range(self.n):
            if self.ids[i] not in other:
                return False
        return True

    def __hash__(self):
        if self.hash_ == -1:
            self.hash_ = hash(frozenset(self))
        return self.hash_

    def __or__(self, other):
        return frozenset(self) | other

    def __ror__(self, other):
        return other | frozenset(self)

    def __and__(self, other):
        return frozenset(self) & other

    def __rand__(self, other):
        return other & frozenset(self)

    def __sub__(self, other):
        return frozenset(self) - other

    def __rsub__(self, other):
        return other - frozenset(self)

    def __xor__(self, other):
        return frozenset(self) ^ other

    def __rxor__(self, other):
        return other ^ frozenset(self)

    def __reduce__(self):
        return (frozenset, (tuple(self),))

    def __repr__(self):
        return f"Ids({list(self)!r})"


_AbstractSet.register(Ids)


@cython.final
@cython.freelist(8)
cdef class _IdsIterator:
    cdef Ids of
    cdef Py_ssize_t at

    def __iter__(self):
        return self

    def __next__(self):
        if self.at >= self.of.n:
            raise StopIteration
        self.at += 1
        return self.of.ids[self.at - 1]

    def __length_hint__(self):
        return self.of.n - self.at


cdef Ids _new_ids(size_t n):
    """An ``Ids`` with room for ``n`` ids (its ``n`` set; the caller writes them, then
    calls ``_seal``). Allocates no Python object but itself."""
    cdef Ids out = Ids.__new__(Ids)
    if n > INLINE_IDS:
        out.ids = <uint32_t*>malloc(n * sizeof(uint32_t))
        if out.ids == NULL:
            out.ids = out.own
            raise MemoryError()
    out.n = n
    return out



cdef inline void _seal(Ids out) noexcept:
    """Sort ``out``'s ids and drop repeats (none are expected: every id is on one node, and
    a walk ends on a node once), so ``in`` can bisect and equal results compare equal."""
    out.n = topicstore_sort_ids(out.ids, out.n)


#: The answer of a match that reaches no id.
NO_IDS = _new_ids(0)


cdef array.array _uint32_array(const vector[uint32_t]& values):
    """``values`` as an ``array('I')``, in one copy."""
    cdef array.array out = array.clone(_UINT32, values.size(), False)
    if values.size():
        memcpy(out.data.as_voidptr, values.data(), values.size() * sizeof(uint32_t))
    return out


cdef inline str _text(const string& s):
    return s.decode("utf-8", "strict")


cdef inline object _pattern(Core* core, uint32_t sub_id):
    """The pattern text of ``sub_id`` as a str, or None."""
    cdef uint32_t size = 0
    cdef const char* data = core.pattern_of(sub_id, &size)
    if data == NULL:
        return None
    return data[:size].decode("utf-8", "strict")


cdef inline size_t _utf8_size(str text) except? 0:
    """Bytes of ``text`` in UTF-8 (kept in the str: indexing it asks again)."""
    cdef Py_ssize_t size
    PyUnicode_AsUTF8AndSize(text, &size)
    return size


cdef inline bint _has(Core* core, uint32_t sub_id):
    return core.has(sub_id)


cdef inline void _flush_wildcards(vector[Token]& out, Py_ssize_t stars, bint hashes):
    """canonical(): a run of wildcards becomes its '*'s, then one '#' if there was any."""
    cdef Token t
    t.data, t.size, t.kind = <const char*>NULL, 0, STAR
    while stars:
        out.push_back(t)
        stars -= 1
    if hashes:
        t.kind = HASH
        out.push_back(t)


cdef class _Core:
    """The C++ structure and the hot paths; ``NativeMatcher`` adds the interface."""

    cdef Core* core
    cdef mutex guard  # see the module docstring
    cdef vector[uint32_t] words   # scratch of match (under the guard): the topic's word ids,
                                  # its size room for them (see Core::split_words)
    cdef bint fast_amqp
    cdef Py_ssize_t max_subscriptions
    cdef object dialect_
    cdef object limits_
    cdef Py_ssize_t fast_len
    cdef Py_ssize_t max_pattern_bytes
    cdef Py_ssize_t max_words
    cdef object split

    def __cinit__(self, *args, **kwargs):
        self.core = new Core()
        self.words.resize(256)  # an AMQP key's most words: a match does not grow it

    def __dealloc__(self):
        del self.core

    cdef inline void _enter(self) noexcept:
        """Take the guard; waits, if it must, with the GIL released (see the module
        docstring: nobody waits for the guard holding the GIL)."""
        if not self.guard.try_lock():
            with nogil:
                self.guard.lock()

    cdef inline void _leave(self) noexcept:
        self.guard.unlock()

    cdef inline bint _is_plain_key(self, topic) noexcept:
        """Whether ``topic`` is an ASCII AMQP key short enough that it cannot break the
        byte or word limits, without NUL: the splitter's own fast path, split in C."""
        if not (self.fast_amqp and type(topic) is str and PyUnicode_IS_ASCII(topic)):
            return False
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(topic)
        return 0 < n <= self.fast_len and memchr(PyUnicode_DATA(topic), 0, n) == NULL

    cdef _configure(self, object dialect, object limits, object split):
        self.dialect_ = dialect
        self.limits_ = limits
        self.fast_amqp = dialect.name == "amqp"
        # As the dialect's topic_splitter: with fewer characters than max_words, a key
        # cannot have too many words.
        self.fast_len = min(limits.max_topic_bytes, limits.max_words - 1)
        self.max_pattern_bytes = limits.max_pattern_bytes
        self.max_words = limits.max_words
        self.max_subscriptions = limits.max_subscriptions
        self.split = split

    cdef bint _fast_tokens(self, pattern, vector[Token]& out):
        """The canonical tokens of an AMQP ``pattern`` that is plainly valid (a non-empty
        ASCII str without NUL, within the byte and word limits), pointing into its text;
        False (``out`` unspecified) for anything else, which the general, validating path
        in ``grammar`` then handles. Same rules, same result: ``tokens_of`` + ``canonical``."""
        if not self.fast_amqp or type(pattern) is not str or not PyUnicode_IS_ASCII(pattern):
            return False
        return self._raw_tokens(
            <const char*>PyUnicode_DATA(pattern), PyUnicode_GET_LENGTH(pattern), out, False
        )

    cdef bint _raw_tokens(self, const char* data, Py_ssize_t n, vector[Token]& out,
                          bint check_ascii):
        """``_fast_tokens`` of ``n`` bytes at ``data`` (ASCII checked here when
        ``check_ascii``: UTF-8 from a buffer rather than an ASCII str)."""
        if not self.fast_amqp or n == 0 or n > self.max_pattern_bytes:
            return False
        if memchr(data, 0, n) != NULL:
            return False
        cdef Py_ssize_t start = 0, i, words = 0, stars = 0
        if check_ascii:
            for i in range(n):
                if <unsigned char>data[i] >= 128:
                    return False
        out.clear()
        cdef bint hashes = False
        cdef Token t
        for i in range(n + 1):
            if i < n and data[i] != 46:  # '.'
                continue
            words += 1
            if i - start == 1 and data[start] == 42:  # '*'
                stars += 1
            elif i - start == 1 and data[start] == 35:  # '#'
                hashes = True
            else:
                _flush_wildcards(out, stars, hashes)
                stars, hashes = 0, False
                t.data, t.size, t.kind = data + start, i - start, 0
                out.push_back(t)
            start = i + 1
        _flush_wildcards(out, stars, hashes)
        return words <= self.max_words

    cdef Py_ssize_t _subscribe_arrays(self, const int64_t[:] ids, const int32_t[:] offsets,
                                      const unsigned char[:] data, object lock) except -2:
        """Bulk subscribe from columns, all or nothing: returns how many were indexed, or
        -1 with nothing done when any item needs the general path (a pattern that is not
        plainly valid AMQP, an id out of range, already present, or ids not strictly
        increasing, which also rules out repeats within the batch)."""
        cdef Py_ssize_t n = ids.shape[0], i
        cdef int64_t prev = -1
        cdef int32_t start, end
        cdef vector[Token] spec
        cdef size_t tokens = 0
        cdef bint careful
        cdef vector[uint32_t] added
        cdef int full = 0
        cdef size_t use[6]
        if offsets.shape[0] != n + 1:
            raise ValueError("offsets must hold one more entry than ids")
        if n == 0:
            return 0
        if data.shape[0] == 0:
            return -1
        cdef const char* text = <const char*>&data[0]
        with lock:
            for i in range(n):
                if ids[i] <= prev or ids[i] >= 4294967296:
                    return -1
                prev = ids[i]
                start, end = offsets[i], offsets[i + 1]
                if end < start or end > data.shape[0]:
                    raise ValueError("offsets out of the data's bounds")
                if not self._raw_tokens(text + start, end - start, spec, True):
                    return -1
                if _has(self.core, <uint32_t>ids[i]):
                    return -1
                tokens += spec.size()
            self._check_room(n, True)
            careful = self.core.room(n, tokens, offsets[n] - offsets[0]) != 0
            # Everything is valid: index (nothing below raises but MemoryError; when
            # `careful`, an item that might not fit stops it, the batch undone).
            self._enter()
            try:
                for i in range(n):
                    start, end = offsets[i], offsets[i + 1]
                    self._raw_tokens(text + start, end - start, spec, False)
                    full = self._add_fitting(<uint32_t>ids[i], spec, text + start, end - start,
                                             careful, added, use)
                    if full:
                        break
            finally:
                self._leave()
            if full:
                self._refuse(full, use, 1, spec.size())
        return n

    def __len__(self):
        return self.core.size()

    def __contains__(self, sub_id):
        if type(sub_id) is not int or not 0 <= sub_id < 2**32:
            return False
        return _has(self.core, <uint32_t>sub_id)

    def node_count(self):
        """Nodes in the trie, root included (the walk's per-level bound)."""
        return self.core.node_count()

    def pattern_of(self, sub_id):
        """The pattern subscription ``sub_id`` was made with, or None."""
        if type(sub_id) is not int or not 0 <= sub_id < 2**32:
            return None
        return _pattern(self.core, <uint32_t>sub_id)

    cdef object _split_words(self, topic, vector[const char*]& data, vector[size_t]& sizes):
        """Validate ``topic`` by the dialect's splitter (raises InvalidTopicError) and point
        ``data``/``sizes`` at its words' UTF-8; returns the words, which keep that alive."""
        cdef list words = self.split(topic)
        cdef Py_ssize_t size
        for word in words:
            data.push_back(PyUnicode_AsUTF8AndSize(word, &size))
            sizes.push_back(size)
        return words

    # A plain method, not a Cython function object: a call skips one indirection, a
    # visible share of a short match; the signature stays in the docstring for inspect.
    @cython.binding(False)
    @cython.embedsignature(True)
    @cython.embedsignature.format("clinic")
    def match(self, topic):
        """Ids of every subscription whose pattern matches ``topic``, as ``Ids``.
        O(frontier x words), at most nodes x (words + 1) steps."""
        cdef vector[const char*] word_data
        cdef vector[size_t] word_size
        cdef bint plain = self._is_plain_key(topic)
        words = None
        if not plain:
            words = self._split_words(topic, word_data, word_size)
        cdef Ends ends
        cdef uint32_t ref, node, last = 0, count
        cdef uint32_t[8] holding  # COMBO_NODES: the end nodes with ids, sorted
        cdef size_t holders = 0, total = 0, i, j, n, at = 0
        cdef PyObject* cached
        cdef bint keeping  # the kept results are used (see ResultGate)
        cdef Ids result
        cdef uint32_t* out
        self._enter()
        try:
            if plain:
                n = self.core.split_words(<const char*>PyUnicode_DATA(topic),
                                          PyUnicode_GET_LENGTH(topic), b'.', self.words)
            else:
                n = self.core.word_ids(word_data.data(), word_size.data(), word_data.size(),
                                       self.words)
            ends = self.core.walk(self.words.data(), n, NULL)
            n = ends.size
            for i in range(n):
                ref = ends.data[i]
                if ref & HAS_IDS:
                    node = ref & INDEX
                    if holders < COMBO_NODES:
                        j = holders
                        while j > 0 and holding[j - 1] > node:
                            holding[j] = holding[j - 1]
                            j -= 1
                        holding[j] = node
                    holders += 1
                    last = node
                    at = i
            if holders == 0:
                return NO_IDS
            keeping = holders <= COMBO_NODES and self.core.result_gate().open()
            if holders == 1:
                if keeping:
                    cached = self.core.cached(last)  # before reading its ids
                    if cached != NULL:
                        self.core.result_gate().looked(True)
                        return <object>cached
                total = self.core.end_count(ends, at)
                keeping = keeping and total <= CACHED_MAX
            else:
                if keeping:
                    cached = self.core.combo_get(holding, holders)
                    if cached != NULL:
                        self.core.result_gate().looked(True)
                        return <object>cached
                for i in range(n):
                    if ends.data[i] & HAS_IDS:
                        total += self.core.end_count(ends, i)
                keeping = keeping and total <= COMBO_IDS
            if keeping:  # a result small enough to keep was not found: a miss for the gate
                self.core.result_gate().looked(False)
            # Built under the guard: an Ids holds no Python references, so making one
            # cannot run the garbage collector or any Python code (see the class).
            result = _new_ids(total)
            out = result.ids
            for i in range(n):
                if ends.data[i] & HAS_IDS:
                    count = self.core.end_count(ends, i)
                    memcpy(out, self.core.end_ids(ends, i), count * sizeof(uint32_t))
                    out += count
            _seal(result)
            if keeping and holders == 1:
                self.core.keep_cached(last, <PyObject*>result)
            elif keeping:
                self.core.combo_put(holding, holders, self.core.version(), <PyObject*>result)
            return result
        finally:
            self._leave()

    def match_ids(self, topics):
        """``match`` for many topics at once, answered in arrays: ``(counts, ids, errors)``.
        Topic ``k``'s ids, sorted, are the ``counts[k]`` entries of ``ids`` after those of
        the topics before it (both ``array('I')``); ``errors`` maps the position of each
        topic the dialect refuses to its ``MatcherError`` (and its count is 0). No Python
        object per id, and the walks run without the GIL, ``MATCH_SLICE`` topics per hold
        of the guard (see the module docstring). Topics are validated first, all of them,
        with the GIL: the same rules and errors as ``match``."""
        topics = tuple(topics)  # holds every topic (their text is read without the GIL)
        cdef Py_ssize_t n = len(topics), k
        cdef vector[TopicRef] refs
        cdef TopicRef ref
        cdef vector[const char*] word_data
        cdef vector[size_t] word_size
        cdef list kept = []
        cdef dict errors = {}
        refs.resize(n)
        for k in range(n):
            topic = topics[k]
            if self._is_plain_key(topic):
                ref.data = <const char*>PyUnicode_DATA(topic)
                ref.size, ref.kind = PyUnicode_GET_LENGTH(topic), 0
            else:
                ref.first = word_data.size()
                try:
                    kept.append(self._split_words(topic, word_data, word_size))
                except MatcherError as e:
                    errors[k] = e
                    ref.kind = 2
                else:
                    ref.count, ref.kind = word_data.size() - ref.first, 1
            refs[k] = ref
        cdef vector[uint32_t] counts, ids, words
        counts.reserve(n)
        cdef size_t start = 0, stop
        cdef const char* const* data_at = word_data.data()
        cdef const size_t* size_at = word_size.data()
        while start < <size_t>n:
            stop = min(<size_t>n, start + MATCH_SLICE)
            self._enter()
            try:
                with nogil:
                    topicstore_match_refs(self.core[0], refs.data() + start, stop - start,
                                          data_at, size_at, words, counts, ids)
            finally:
                self._leave()
            start = stop
        return _uint32_array(counts), _uint32_array(ids), errors

    def _answers_by_tuples(self, Py_ssize_t words):
        """Whether a topic of ``words`` words is answered by the tuple index (tests)."""
        return words >= 0 and self.core.answers_by_tuples(words)

    def _walk(self, words, level_sizes):
        """The walk over ``words`` (already split): the nodes it ends on, and, into
        ``level_sizes`` when given, the nodes live at each level (tests check the bound)."""
        cdef vector[uint32_t] ids
        cdef vector[uint32_t] sizes
        cdef Py_ssize_t size, i
        cdef const char* data
        for word in words:
            data = PyUnicode_AsUTF8AndSize(word, &size)
            ids.push_back(self.core.word_id(data, size))
        cdef Ends ends
        cdef vector[uint32_t] nodes  # copied out before any Python object is built
        self._enter()
        try:
            ends = self.core.walk(ids.data(), ids.size(), &sizes if level_sizes is not None else NULL)
            for i in range(<Py_ssize_t>ends.size):
                nodes.push_back(ends.data[i] & INDEX)
        finally:
            self._leave()
        if level_sizes is not None:
            level_sizes.extend(sizes)
        return list(nodes)

    cdef bint _index(self, uint32_t sub_id, tuple tokens, str pattern) except -1:
        """Index one validated subscription (canonical ``tokens``); False if the id is
        already there. The caller checked the write fits (``_check_fit``)."""
        cdef vector[Token] spec
        cdef Token t
        cdef Py_ssize_t size
        for token in tokens:
            if token is ONE:
                t.data, t.size, t.kind = <const char*>NULL, 0, STAR
            elif token is MANY:
                t.data, t.size, t.kind = <const char*>NULL, 0, HASH
            else:
                t.data = PyUnicode_AsUTF8AndSize(token, &size)
                t.size, t.kind = size, 0
            spec.push_back(t)
        cdef const char* text = PyUnicode_AsUTF8AndSize(pattern, &size)
        self._enter()
        try:
            return self.core.add(sub_id, spec.data(), spec.size(), text, size)
        finally:
            self._leave()

    cdef bint _fast_subscribe(self, sub_id, pattern, object lock) except -1:
        """``Matcher.subscribe`` for a plainly valid AMQP pattern, without building tokens
        in Python; False when the pattern needs the general path."""
        cdef vector[Token] spec
        if type(sub_id) is not int or not 0 <= sub_id < 2**32:
            return False
        if not self._fast_tokens(pattern, spec):
            return False
        cdef uint32_t key = sub_id
        with lock:
            text = _pattern(self.core, key)
            if text is not None:
                if text == pattern:
                    return True
                raise SubscriptionConflictError(
                    "id_conflict",
                    f"subscription {sub_id} already has pattern {text!r}, not {pattern!r}",
                )
            self._check_room(1, False)
            self._check_fit(1, spec.size(), PyUnicode_GET_LENGTH(pattern))
            self._enter()
            try:
                self.core.add(key, spec.data(), spec.size(),
                              <const char*>PyUnicode_DATA(pattern), PyUnicode_GET_LENGTH(pattern))
            finally:
                self._leave()
        return True

    cdef int _check_room(self, Py_ssize_t more, bint bulk) except -1:
        """Refuse (CapacityError) ``more`` subscriptions past ``max_subscriptions``."""
        cdef Py_ssize_t limit = self.max_subscriptions
        if self.core.size() + more > limit:
            if not bulk:
                raise CapacityError(
                    "too_many_subscriptions",
                    f"the matcher holds {limit} subscriptions, its limit",
                )
            raise CapacityError(
                "too_many_subscriptions",
                f"{more} more subscriptions would exceed the limit of {limit}",
            )
        return 0

    cdef int _fit_one(self, size_t tokens, size_t text_bytes, vector[uint32_t]& added,
                      size_t* use) except -1:
        """Before indexing one item of a batch that might not fit as a whole: 0 if the
        item fits; else ``Core::room``'s answer, after withdrawing the batch's items
        indexed before it (``added``) and filling ``use`` for ``_refuse``, which the caller
        raises once it left the guard: a refused batch leaves every subscription as it
        was. (A concurrent match may have seen some of them meanwhile, as it may see a
        batch's items before the batch returns.) Called under the guard; builds no Python
        object."""
        cdef size_t k
        cdef int full = self.core.room(1, tokens, text_bytes)
        if full:
            for k in range(added.size()):
                self.core.remove(added[added.size() - 1 - k])
            added.clear()
            self.core.usage(use)  # after the withdrawals: the state the refusal leaves
        return full

    cdef int _add_fitting(self, uint32_t sub_id, vector[Token]& spec, const char* text,
                          size_t size, bint careful, vector[uint32_t]& added,
                          size_t* use) except -1:
        """Index one item of a batch (its tokens ``spec``, its text): first, when the batch
        is ``careful``, ``_fit_one``, whose refusal (returned, the item not indexed) the
        caller raises once it left the guard; else 0, the item remembered in ``added``.
        Called under the guard; builds no Python object."""
        cdef int full = 0
        if careful:
            full = self._fit_one(spec.size(), size, added, use)
            if full:
                return full
            added.push_back(sub_id)
        self.core.add(sub_id, spec.data(), spec.size(), text, size)
        return 0

    cdef inline int _room(self, size_t items, size_t tokens, size_t text_bytes,
                          size_t* use) noexcept:
        """``Core::room``'s answer, and when it is not 0 the usage it was given against
        in ``use`` (for ``_refuse``). C only."""
        cdef int full = self.core.room(items, tokens, text_bytes)
        if full:
            self.core.usage(use)
        return full

    cdef int _check_fit(self, size_t items, size_t tokens, size_t text_bytes) except -1:
        """Refuse (CapacityError) a write of ``items`` patterns, ``tokens`` tokens and
        ``text_bytes`` bytes in all that might not fit the structure's fixed capacities
        (``capacity()``; ``Core::room`` says how the bound is counted). Called by a writer
        (holding the write lock: nothing changes the counts meanwhile), not under the
        guard."""
        cdef size_t use[6]
        cdef int full = self._room(items, tokens, text_bytes, use)
        if full:
            self._refuse(full, use, items, tokens)
        return 0

    cdef int _refuse(self, int full, const size_t* use, size_t items, size_t tokens) except -1:
        """Raise the CapacityError of ``Core::room``'s answer ``full``, ``use`` being the
        ``Core::usage`` it was given against."""
        code, what, at = {
            ROOM_NODES: ("too_many_trie_nodes", "trie nodes", 0),
            ROOM_TAILS: ("too_many_tail_words", "tail words", 2),
            ROOM_TEXT: ("too_much_pattern_text", "text bytes (of patterns not spelled as indexed)", 4),
        }[full]
        raise CapacityError(
            code,
            f"the native engine holds at most {use[at + 1]} {what} and {use[at]} are in use: "
            f"{items} more pattern(s) of {tokens} tokens in all might not fit",
        )

    def check_room(self, patterns):
        """Raise CapacityError when subscribing ``patterns`` (new, and valid in the
        dialect) might exceed ``max_subscriptions`` or a fixed capacity, by the bound a
        batch is first checked with (every token a node: it refuses only within a fraction
        of a percent of a capacity). A writer's early refusal; subscribing decides."""
        cdef vector[Token] spec
        cdef size_t ntokens = 0, nbytes = 0, n = 0
        for pattern in patterns:
            if self._fast_tokens(pattern, spec):
                ntokens += spec.size()
            else:
                ntokens += len(canonical(self.dialect_.tokens_of(pattern, self.limits_)))
            nbytes += _utf8_size(pattern)
            n += 1
        cdef size_t use[6]
        cdef int full
        self._check_room(n, n > 1)
        self._enter()  # (no write lock here: the counts are read under the guard)
        try:
            full = self._room(n, ntokens, nbytes, use)
        finally:
            self._leave()
        if full:
            self._refuse(full, use, n, ntokens)

    def capacity(self):
        """(used, capacity) of the structure's fixed capacities: ``trie_nodes`` (root
        included), ``tail_words`` (a tail leaf's words and count) and ``text_bytes``
        (pattern texts stored beside the path, e.g. MQTT's). Past one, writes raise
        ``CapacityError``."""
        cdef size_t use[6]
        self.core.usage(use)
        return {
            "trie_nodes": (use[0], use[1]),
            "tail_words": (use[2], use[3]),
            "text_bytes": (use[4], use[5]),
        }

    def _lower_capacity(self, size_t nodes, size_t tail_words, size_t text_bytes):
        """Lower the fixed capacities (never above the structure's own): for tests, which
        reach them with thousands of patterns."""
        self.core.lower_capacity(nodes, tail_words, text_bytes)

    cdef Py_ssize_t _fast_subscribe_many(self, items, object lock) except -1:
        """``Matcher.subscribe_many``, all or nothing: every item validated (plainly valid
        AMQP patterns in C, the rest by ``grammar``) and checked against the table and the
        batch before anything is indexed."""
        cdef vector[Token] spec
        cdef dict batch = {}
        cdef dict tokens = {}  # of the items the general path validated
        cdef bint fast, careful
        cdef size_t ntokens = 0, nbytes = 0, size, count
        cdef vector[uint32_t] added
        cdef int full = 0
        cdef size_t use[6]
        with lock:
            for sub_id, pattern in items:
                check_sub_id(sub_id)
                fast = self._fast_tokens(pattern, spec)
                if not fast:
                    pattern = checked_text(pattern, "pattern", self.max_pattern_bytes)
                text = _pattern(self.core, <uint32_t>sub_id)
                if text is None:
                    text = batch.get(sub_id)
                if text is not None:
                    if text == pattern:
                        continue
                    raise SubscriptionConflictError(
                        "id_conflict",
                        f"subscription {sub_id} already has pattern {text!r}, not {pattern!r}",
                    )
                batch[sub_id] = pattern
                if fast:
                    ntokens += spec.size()
                else:
                    tokens[sub_id] = canonical(self.dialect_.tokens_of(pattern, self.limits_))
                    ntokens += len(tokens[sub_id])
                nbytes += _utf8_size(pattern)
            self._check_room(len(batch), True)
            careful = self.core.room(len(batch), ntokens, nbytes) != 0
            # Everything is valid: index (nothing below raises but MemoryError, and
            # CapacityError with the batch undone when it is `careful`).
            for sub_id, pattern in batch.items():
                if sub_id in tokens:
                    if careful:
                        count, size = len(tokens[sub_id]), _utf8_size(pattern)
                        self._enter()
                        try:
                            full = self._fit_one(count, size, added, use)
                        finally:
                            self._leave()
                        if full:
                            self._refuse(full, use, 1, count)
                        added.push_back(<uint32_t>sub_id)
                    self._index(sub_id, tokens[sub_id], pattern)
                else:
                    self._fast_tokens(pattern, spec)
                    size = PyUnicode_GET_LENGTH(pattern)
                    self._enter()
                    try:
                        full = self._add_fitting(<uint32_t>sub_id, spec,
                                                 <const char*>PyUnicode_DATA(pattern), size,
                                                 careful, added, use)
                    finally:
                        self._leave()
                    if full:
                        self._refuse(full, use, 1, spec.size())
        return len(batch)

    cdef bint _withdraw(self, uint32_t sub_id) except -1:
        self._enter()
        try:
            return self.core.remove(sub_id)
        finally:
            self._leave()

    cdef list _items(self):
        cdef vector[uint32_t] ids
        cdef vector[string] texts
        topicstore_items(self.core[0], ids, texts)
        return [(ids[i], _text(texts[i])) for i in range(<Py_ssize_t>ids.size())]

    cdef str _problems(self):
        cdef string problem
        self._enter()
        try:
            problem = self.core.check()
        finally:
            self._leave()
        return problem.decode("utf-8")


cdef class _PatternTable:
    """The id -> pattern table ``Matcher`` keeps as a dict, here a view of the native
    structure (the base class and ``CachedMatcher`` use it as ``_patterns``).

    ``_add`` indexes a subscription and records its pattern in one native write, so the
    base class's ``table[id] = text`` / ``update`` that follow only confirm it; ``pop``
    removes for real (dict semantics), so a later ``_remove`` finds nothing left to do.
    """

    cdef _Core owner

    def __cinit__(self, _Core owner):
        self.owner = owner

    def __len__(self):
        return self.owner.core.size()

    def __contains__(self, sub_id):
        return sub_id in self.owner

    def __iter__(self):
        return iter([sub_id for sub_id, _ in self.owner._items()])

    def __getitem__(self, sub_id):
        text = self.owner.pattern_of(sub_id)
        if text is None:
            raise KeyError(sub_id)
        return text

    def get(self, sub_id, default=None):
        text = self.owner.pattern_of(sub_id)
        return default if text is None else text

    def items(self):
        return self.owner._items()

    def pop(self, sub_id, default=None):
        text = self.owner.pattern_of(sub_id)
        if text is None:
            return default
        self.owner._withdraw(sub_id)
        return text

    def __setitem__(self, sub_id, text):
        if self.owner.pattern_of(sub_id) != text:
            raise KeyError(f"subscription {sub_id} must be indexed (_add) before it is recorded")

    def update(self, batch):
        for sub_id, text in batch.items():
            self[sub_id] = text


class NativeMatcher(_Core, Matcher):
    """Subscribe/unsubscribe O(tokens); match O(frontier x words), bounded by nodes x
    (words + 1), in compiled code. Walks and changes hold a guard; ``match_ids`` walks
    without the GIL (see the module docstring)."""

    name = "native"

    def __init__(self, dialect="amqp", limits=None):
        Matcher.__init__(self, dialect, limits)
        self._patterns = _PatternTable(self)
        (<_Core>self)._configure(self.dialect, self.limits, self._split)

    def subscribe(self, sub_id, pattern):
        """``Matcher.subscribe``: plainly valid AMQP patterns are checked and indexed in
        C, anything else takes the base class's path (same rules, same errors)."""
        if not (<_Core>self)._fast_subscribe(sub_id, pattern, self._write_lock):
            Matcher.subscribe(self, sub_id, pattern)

    def subscribe_many(self, items):
        """``Matcher.subscribe_many`` (all or nothing, validated first), the common case
        in C; returns how many were new."""
        with gc_paused():
            return (<_Core>self)._fast_subscribe_many(items, self._write_lock)

    def subscribe_arrays(self, ids, offsets, data):
        """``Matcher.subscribe_arrays`` without a Python object per subscription when
        every item is plainly valid AMQP, new, and in increasing id order (the store's
        load); otherwise the base class's path. Returns how many were new."""
        done = self._subscribe_arrays_in_c(ids, offsets, data)
        return done if done >= 0 else Matcher.subscribe_arrays(self, ids, offsets, data)

    def _subscribe_arrays_in_c(self, ids, offsets, data):
        """The C path of ``subscribe_arrays`` alone, all or nothing: how many were indexed,
        or -1 with nothing done when some item needs the general path."""
        return (<_Core>self)._subscribe_arrays(ids, offsets, data, self._write_lock)

    def _add(self, sub_id, tokens, pattern):
        cdef _Core core = <_Core>self
        tokens = canonical(tokens)
        core._check_fit(1, len(tokens), _utf8_size(pattern))
        core._index(sub_id, tokens, pattern)

    def _remove(self, sub_id, tokens):
        # Usually a no-op: the table's pop already withdrew it (see _PatternTable).
        (<_Core>self)._withdraw(sub_id)

    def unsubscribe(self, sub_id):
        """Remove subscription ``sub_id``; False when it was not subscribed. O(depth)."""
        if type(sub_id) is not int or not 0 <= sub_id < 2**32:
            return False
        with self._write_lock:
            return (<_Core>self)._withdraw(sub_id)

    def subscriptions(self):
        """Every (id, pattern), copied in one native read."""
        with self._write_lock:
            items = (<_Core>self)._items()
        return iter(items)

    def _check(self):
        Matcher._check(self)
        problem = (<_Core>self)._problems()
        assert not problem, problem

