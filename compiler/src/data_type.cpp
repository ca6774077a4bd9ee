#include "data_type.h"

namespace ccc {

namespace {

struct DTypeInfo {
  const char* name;
  size_t size;
  bool is_float;
  const char* device_type;
};

DTypeInfo info(DataType t) {
  switch (t) {
    case DataType::F64: return {"f64", 8, true, "double"};
    case DataType::F32: return {"f32", 4, true, "float"};
    case DataType::F16: return {"f16", 2, true, "ccc::f16"};
    case DataType::BF16: return {"bf16", 2, true, "ccc::bf16"};
    case DataType::I64: return {"i64", 8, false, "long long"};
    case DataType::U64: return {"u64", 8, false, "unsigned long long"};
    case DataType::I32: return {"i32", 4, false, "int"};
    case DataType::U32: return {"u32", 4, false, "unsigned"};
    case DataType::I8: return {"i8", 1, false, "signed char"};
    case DataType::U8: return {"u8", 1, false, "unsigned char"};
    case DataType::F8E4M3: return {"f8e4m3", 1, true, "ccc::f8e4m3"};
    case DataType::F8E5M2: return {"f8e5m2", 1, true, "ccc::f8e5m2"};
  }
  return {"?", 1, false, "?"};
}

}  // namespace

const char* data_type_name(DataType t) { return info(t).name; }
size_t data_type_size(DataType t) { return info(t).size; }
bool data_type_is_float(DataType t) { return info(t).is_float; }
const char* data_type_device_type(DataType t) { return info(t).device_type; }

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

bool reduce_op_finishes(ReduceOp op) { return op == ReduceOp::Avg; }

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps)
    if (name == reduce_op_name(op)) return op;
  return std::nullopt;
}

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::Residual: return "residual";
    case Epilogue::ResidualRmsNorm: return "residual-rmsnorm";
    default: return "none";
  }
}

std::optional<Epilogue> parse_epilogue(std::string_view name) {
  for (Epilogue e : kAllEpilogues)
    if (name == epilogue_name(e)) return e;
  return std::nullopt;
}

const char* protocol_name(Protocol p) { return p == Protocol::Ll ? "ll" : "simple"; }

std::optional<Protocol> parse_protocol(std::string_view name) {
  if (name == "simple") return Protocol::Simple;
  if (name == "ll") return Protocol::Ll;
  return std::nullopt;
}

}  // namespace ccc
