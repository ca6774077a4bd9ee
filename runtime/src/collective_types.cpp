#include "ccc/collective_types.h"

namespace ccc {

const char* data_type_name(DataType t) {
  switch (t) {
    case DataType::F64: return "f64";
    case DataType::F32: return "f32";
    case DataType::F16: return "f16";
    case DataType::BF16: return "bf16";
    case DataType::I64: return "i64";
    case DataType::U64: return "u64";
    case DataType::I32: return "i32";
    case DataType::U32: return "u32";
    case DataType::I8: return "i8";
    case DataType::U8: return "u8";
  }
  return "?";
}

size_t data_type_size(DataType t) {
  switch (t) {
    case DataType::F64: case DataType::I64: case DataType::U64: return 8;
    case DataType::F32: case DataType::I32: case DataType::U32: return 4;
    case DataType::F16: case DataType::BF16: return 2;
    case DataType::I8: case DataType::U8: return 1;
  }
  return 0;
}

std::optional<DataType> parse_data_type(std::string_view name) {
  for (DataType t : kAllDataTypes)
    if (name == data_type_name(t)) return t;
  return std::nullopt;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps)
    if (name == reduce_op_name(op)) return op;
  return std::nullopt;
}

}  // namespace ccc
