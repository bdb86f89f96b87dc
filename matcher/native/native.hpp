// The `native` engine's C++ core, all of it: matcher/_native.pyx includes this. Class Core
// is declared in core.hpp; its members are defined by structure in the other headers.
#pragma once

#include "core.hpp"
#include "check.hpp"
#include "kept.hpp"
#include "tails.hpp"
#include "texts.hpp"
#include "trie.hpp"
#include "tuples.hpp"
#include "walk.hpp"
#include "words.hpp"
