// koila: asks koila, from the command line, how a TorchScript model's batch runs under a
// memory budget, before running it (`koila plan`, `koila fit`; see koila.1 and --help).
// Every failure is one line on stderr and a non-zero exit status: 2 for a mistake in the
// arguments, 1 for anything else (a bad file, device or model, a batch that cannot run).
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "capi.h"
#include "fit.h"
#include "options.h"
#include "report.h"
#include "session.h"
#include "svg.h"

using namespace koila_cli;

namespace {

int run(const Options& o) {
  Session session(o);
  Json j;
  j.begin_object();
  j.field("command", o.command).field("koila_version", koila_version());
  setup_json(j, session);
  if (o.command == "fit") {
    const FitResult r = find_fit(session);
    if (o.json) {
      fit_json(j, r);
      std::fputs(j.end_object().str().c_str(), stdout);
    } else {
      std::fputs(fit_text(r, session).c_str(), stdout);
    }
    return 0;
  }
  BatchPlan b = session.plan_batch(o.batch);
  if (!b.plan) throw CliError("a batch of " + std::to_string(o.batch) + " cannot run: " + b.message);
  const PlanReport r = make_plan_report(session, b);
  if (!o.svg.empty()) {
    std::ofstream file(o.svg, std::ios::binary);
    if (!file) throw CliError("--svg: cannot write '" + o.svg + "'");
    file << timeline_svg(r, session);
    if (!file.flush()) throw CliError("--svg: cannot write '" + o.svg + "'");
  }
  if (o.json) {
    plan_json(j, r);
    if (!o.svg.empty()) j.field("svg", o.svg);
    std::fputs(j.end_object().str().c_str(), stdout);
  } else {
    std::fputs(plan_text(r, session).c_str(), stdout);
    if (!o.svg.empty()) std::printf("timeline written to %s\n", o.svg.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    if (!parse_options(std::vector<std::string>(argv + 1, argv + argc), &o)) return 0;
    return run(o);
  } catch (const CliError& e) {
    std::fprintf(stderr, "koila: error: %s\n", first_line(e.what()).c_str());
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "koila: error: %s\n", first_line(e.what()).c_str());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "koila: error: an unknown failure\n");
    return 1;
  }
}
