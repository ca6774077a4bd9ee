// Element types and reduction ops a collective can be specialised for.
#pragma once

#include <optional>
#include <string_view>

namespace ccc {

enum class DType { F64, F32, F16, BF16, I64, U64, I32, U32, I8, U8 };
enum class ReduceOp { Sum, Prod, Min, Max, Avg };

inline constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                       DType::U64, DType::I32, DType::U32, DType::I8,  DType::U8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min,
                                             ReduceOp::Max, ReduceOp::Avg};

const char* dtype_name(DType t);      // "f32", ...
int dtype_size(DType t);              // bytes per element
bool dtype_is_float(DType t);
const char* dtype_device_type(DType t);  // the prelude's spelling: "float", "ccc::f16", ...
std::optional<DType> parse_dtype(std::string_view name);

const char* reduce_op_name(ReduceOp op);  // "sum", ...
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

}  // namespace ccc
