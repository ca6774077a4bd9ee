// Element types, reduction ops and protocols a collective can be specialised for. (The runtime's
// collective_types.h spells the same names; this is the one definition, in the compiler library
// because lowering and emission need it.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ccc {

enum class DataType { F64, F32, F16, BF16, I64, U64, I32, U32, I8, U8 };
enum class ReduceOp { Sum, Prod, Min, Max, Avg };

inline constexpr DataType kAllDataTypes[] = {DataType::F64, DataType::F32, DataType::F16, DataType::BF16,
                                             DataType::I64, DataType::U64, DataType::I32, DataType::U32,
                                             DataType::I8,  DataType::U8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                             ReduceOp::Avg};

const char* data_type_name(DataType t);         // "f32", ...
size_t data_type_size(DataType t);              // bytes per element
bool data_type_is_float(DataType t);
const char* data_type_device_type(DataType t);  // the device prelude's spelling: "float", "ccc::f16", ...
std::optional<DataType> parse_data_type(std::string_view name);

const char* reduce_op_name(ReduceOp op);        // "sum", ...
// Whether the write that completes a value applies a finish (avg: / N); the device prelude's
// Op::finishes.
bool reduce_op_finishes(ReduceOp op);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

// How a rank gets a peer's data (docs/codegen.md, "Protocols").
//   simple: the consumer waits for the producer's progress (pushed into its inbox), then loads
//           the chunk from the producer's buffer (a pull: bandwidth).
//   ll:     the producer pushes the chunk into the consumer's receive slots as 8-byte lines of
//           {4 data bytes, 4-byte flag}, and the consumer spins on its own memory until each
//           line's flag says "this launch" (low latency, small messages only: kLlMaxBytes).
enum class Protocol { Simple, Ll };
const char* protocol_name(Protocol p);  // "simple", "ll"
// "simple" or "ll"; nullopt for anything else.
std::optional<Protocol> parse_protocol(std::string_view name);

// The most bytes of the collective's vector (blocks * count * dtype size) an `ll` launch moves.
// Every remote read owns a receive region of the whole vector at twice its size (half of each
// line is flag), so the receive slots a rank needs grow with this cap times its remote reads.
constexpr int64_t kLlMaxBytes = 256 * 1024;

}  // namespace ccc
