#include "dist/agreement.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace koila::dist {

namespace {

// One row per rank of an int64 tensor; each rank fills its own and a sum all-reduce hands
// every rank every row. Doubles travel as their bits, the message as bytes.
constexpr int64_t kHeader = 7;
constexpr int64_t kMessageWords = 64;  // up to 511 bytes of the failing rank's message
constexpr int64_t kColumns = kHeader + kMessageWords;

const char* code_name(Code code) {
  switch (code) {
    case Code::Ok: return "KOILA_OK";
    case Code::InvalidArgument: return "KOILA_ERROR_INVALID_ARGUMENT";
    case Code::Shape: return "KOILA_ERROR_SHAPE";
    case Code::Dtype: return "KOILA_ERROR_DTYPE";
    case Code::Device: return "KOILA_ERROR_DEVICE";
    case Code::OutOfMemory: return "KOILA_ERROR_OUT_OF_MEMORY";
    case Code::NotSplittable: return "KOILA_ERROR_NOT_SPLITTABLE";
    case Code::Io: return "KOILA_ERROR_IO";
    case Code::Unsupported: return "KOILA_ERROR_UNSUPPORTED";
    case Code::Internal: return "KOILA_ERROR_INTERNAL";
  }
  return "an unknown code";
}

const char* kind_name(LossReduction::Kind kind) {
  switch (kind) {
    case LossReduction::Kind::Mean: return "a MEAN over its batch";
    case LossReduction::Kind::Sum: return "a SUM over its batch";
    case LossReduction::Kind::Other: return "neither a MEAN nor a SUM over a lazy batch";
  }
  return "?";
}

}  // namespace

std::vector<Report> agree(Group::Comm& comm, int rank, int size, const Report& mine) {
  at::Tensor rows = at::zeros({size, kColumns}, at::kLong);
  int64_t* row = rows.data_ptr<int64_t>() + rank * kColumns;
  row[0] = static_cast<int64_t>(mine.code);
  row[1] = static_cast<int64_t>(mine.kind);
  std::memcpy(&row[2], &mine.weight, sizeof(double));
  row[3] = mine.tensors;
  row[4] = mine.elements;
  const size_t length = std::min(mine.message.size(), size_t(kMessageWords * 8 - 1));
  row[5] = static_cast<int64_t>(length);
  row[6] = mine.staged ? 0 : 1;
  std::memcpy(&row[kHeader], mine.message.data(), length);
  at::Tensor shared = comm.device.is_cpu() ? rows : rows.to(comm.device);
  start_all_reduce(comm, shared).wait();
  if (!comm.device.is_cpu()) rows = shared.to(at::kCPU);
  std::vector<Report> reports(size);
  for (int r = 0; r < size; ++r) {
    const int64_t* v = rows.data_ptr<int64_t>() + r * kColumns;
    Report& report = reports[r];
    report.code = static_cast<Code>(v[0]);
    report.kind = static_cast<LossReduction::Kind>(v[1]);
    std::memcpy(&report.weight, &v[2], sizeof(double));
    report.tensors = v[3];
    report.elements = v[4];
    report.staged = v[6] == 0;
    const size_t n = static_cast<size_t>(std::clamp<int64_t>(v[5], 0, kMessageWords * 8 - 1));
    report.message.assign(reinterpret_cast<const char*>(&v[kHeader]), n);
  }
  return reports;
}

void check_verdict(const std::vector<Report>& reports, int rank, const char* unchanged) {
  std::string failed;
  Code code = Code::Ok;
  std::string message;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].code == Code::Ok) continue;
    failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    if (code == Code::Ok) {
      code = reports[r].code;
      message = "rank " + std::to_string(r) + (static_cast<int>(r) == rank ? " (this process)" : "") + " failed with " +
                code_name(code) + ": " + reports[r].message;
    }
  }
  if (code != Code::Ok) {
    const std::string ranks = failed.find(',') == std::string::npos ? "rank " + failed : "ranks " + failed;
    throw FinalError(code, message + " [failed: " + ranks + "; " + unchanged + " on any rank]");
  }
  for (size_t r = 1; r < reports.size(); ++r) {
    if (reports[r].tensors != reports[0].tensors || reports[r].elements != reports[0].elements)
      throw FinalError(Code::InvalidArgument,
                       "the ranks pass different tensors: rank 0 " + std::to_string(reports[0].tensors) + " of " +
                           std::to_string(reports[0].elements) + " elements in all, rank " + std::to_string(r) + " " +
                           std::to_string(reports[r].tensors) + " of " + std::to_string(reports[r].elements) + " [" +
                           unchanged + " on any rank]");
    if (reports[r].kind != reports[0].kind)
      throw FinalError(Code::InvalidArgument, std::string("the ranks' losses reduce differently: rank 0's is ") +
                                                  kind_name(reports[0].kind) + ", rank " + std::to_string(r) + "'s " +
                                                  kind_name(reports[r].kind) + " [" + unchanged + " on any rank]");
  }
}

[[noreturn]] void fail_together(Group::Comm& comm, int rank, int size, Report mine, const char* unchanged) {
  try {
    throw;
  } catch (const FinalError&) {
    throw;
  } catch (...) {
    Complaint complaint = complaint_from_current_exception();
    mine.code = complaint.code;
    const std::string text = std::move(complaint.message);
    mine.message = text;
    if (comm.broken) throw Error(mine.code, text);
    const std::vector<Report> reports = agree(comm, rank, size, mine);
    check_verdict(reports, rank, unchanged);
  }
  fail(Code::Internal, "a rank failed but the group agreed on success");
}

double scale_of(const std::vector<Report>& reports, int rank) {
  switch (reports[0].kind) {
    case LossReduction::Kind::Sum: return 1;
    case LossReduction::Kind::Other: return 1.0 / static_cast<double>(reports.size());
    case LossReduction::Kind::Mean: break;
  }
  double total = 0;
  for (const Report& r : reports) total += r.weight;
  // Nothing averaged anywhere (every target ignored): nothing to add, as a single process
  // that averaged over nothing adds nothing.
  return total > 0 ? reports[rank].weight / total : 0;
}

}  // namespace koila::dist
