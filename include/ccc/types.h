// The vocabulary of ccc's API: which collective, on which element type, with which reduction,
// over which protocol. The C API (ccc.h) spells the same with NCCL's enum values.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ccc {

enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AllToAll };
inline constexpr std::array<Collective, 6> kAllCollectives{Collective::AllReduce, Collective::ReduceScatter,
                                                           Collective::AllGather, Collective::Broadcast,
                                                           Collective::Reduce,    Collective::AllToAll};
const char* collective_name(Collective c);  // "allreduce", "reduce_scatter", ...

// F8E4M3 and F8E5M2: OCP 8-bit floats (E4M3 with no infinity, as torch.float8_e4m3fn; E5M2 as
// torch.float8_e5m2), NCCL's ncclFloat8e4m3 and ncclFloat8e5m2.
enum class DataType { F64, F32, F16, BF16, I64, U64, I32, U32, I8, U8, F8E4M3, F8E5M2 };
inline constexpr DataType kAllDataTypes[] = {DataType::F64, DataType::F32, DataType::F16,    DataType::BF16,
                                             DataType::I64, DataType::U64, DataType::I32,    DataType::U32,
                                             DataType::I8,  DataType::U8,  DataType::F8E4M3, DataType::F8E5M2};
const char* data_type_name(DataType t);  // "f32", "f8e4m3", ...
size_t data_type_size(DataType t);       // bytes per element
std::optional<DataType> parse_data_type(std::string_view name);

enum class ReduceOp { Sum, Prod, Min, Max, Avg };
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                             ReduceOp::Avg};
const char* reduce_op_name(ReduceOp op);  // "sum", ...
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

// How a rank gets a peer's data (docs/codegen.md, "Protocols"). Simple: the consumer waits for
// the producer's progress, then loads from the producer's buffer (bandwidth). Ll: the producer
// pushes 8-byte lines of {4 data bytes, 4-byte flag} into the consumer's memory, which spins on
// them (latency; small messages only).
enum class Protocol { Simple, Ll };
inline constexpr Protocol kAllProtocols[] = {Protocol::Simple, Protocol::Ll};
const char* protocol_name(Protocol p);  // "simple", "ll"
std::optional<Protocol> parse_protocol(std::string_view name);

// What an allreduce does with its result before it writes it (docs/epilogue.md). None: the
// reduction. Residual: out = allreduce(x) + residual, the residual a tensor of `count` elements
// of each rank's (tensor parallelism's residual stream: FlashInfer's and TensorRT-LLM's
// allreduce_fusion pattern, before the norm), added once per element where the schedule completes
// it, so the copies that follow carry the sum. ResidualRmsNorm: then out = rmsnorm(that) * weight
// over rows of `hidden` elements, the pre-norm sum optionally written out as the next residual.
enum class Epilogue { None, Residual, ResidualRmsNorm };
inline constexpr Epilogue kAllEpilogues[] = {Epilogue::None, Epilogue::Residual, Epilogue::ResidualRmsNorm};
const char* epilogue_name(Epilogue e);  // "none", "residual", "residual-rmsnorm"
std::optional<Epilogue> parse_epilogue(std::string_view name);

}  // namespace ccc
