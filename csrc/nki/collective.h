// The static facts of an nki.collectives instruction, shared by the verifier, the executor
// (exec_collective.cpp) and the cost model: its kind, reduction, collective dimension and
// replica groups (or source-target pairs), parsed from the program's interned text.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "program.h"

namespace neuron::nki::coll {

enum class Kind { AllReduce, AllGather, ReduceScatter, AllToAll, Permute, Ring, RingReduce };

// Whether `op` moves data between ranks (every collective but rank_id).
bool moves_data(Op op);

struct Info {
  Kind kind = Kind::AllReduce;
  Alu op = Alu::Add;   // reducing kinds
  int dim = 0;         // all_gather, reduce_scatter, all_to_all
  int channel = 0;     // ring permutes
  std::vector<std::vector<int>> groups;      // replica groups (Permute: none)
  std::vector<std::pair<int, int>> pairs;    // Permute: (source, target)
  int dst = 0, src = 1, src1 = -1;           // operand indices
  int ranks = 1;                             // ranks per group (Permute: ranks named)
};

// Parses the instruction's attributes. Throws std::invalid_argument naming the problem.
Info info_of(const Program& prog, const Instr& in);

// "0,1;2,3" <-> [[0, 1], [2, 3]]; "0>1;1>0" <-> [(0, 1), (1, 0)]. Throw std::invalid_argument.
std::vector<std::vector<int>> parse_groups(const std::string& text);
std::vector<std::pair<int, int>> parse_pairs(const std::string& text);
std::string groups_text(const std::vector<std::vector<int>>& groups);  // "[[0, 1], [2, 3]]"
std::string pairs_text(const std::vector<std::pair<int, int>>& pairs);  // "[(0, 1), (1, 0)]"

// The group of `rank` (its members in order) and its index in it; empty when no group has it.
std::pair<std::vector<int>, int> group_of(const std::vector<std::vector<int>>& groups, int rank);

// The rank whose data `rank` holds after `step` ring steps (rank_id at step 0).
int ring_rank(const std::vector<std::vector<int>>& groups, int rank, int64_t step);

}  // namespace neuron::nki::coll
