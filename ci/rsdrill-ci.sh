#!/usr/bin/env bash
# rsdrill in a CI job: the one script behind the GitHub Action (action.yml) and the GitLab CI
# template (ci/gitlab/rsdrill.gitlab-ci.yml), runnable as it is anywhere else.
#
# It installs rsdrill, runs an experiment file (`rsdrill run`) or a pytest SLO suite (tests using
# the rsdrill fixture), leaves report.html, junit.xml, result.json and summary.md under the
# results directory, appends the summary to the job's summary page where there is one
# ($GITHUB_STEP_SUMMARY) and to the log, and exits with rsdrill's (or pytest's) exit status:
# 0 every SLO held, 1 an SLO failed, 2 invalid input, 3 aborted, 4 a platform error.
#
# Inputs, from the environment:
#   RSDRILL_EXPERIMENT  an experiment file to run, or
#   RSDRILL_PYTEST      the pytest arguments of an SLO suite (e.g. "tests/chaos -k failover");
#                       exactly one of the two
#   RSDRILL_OUT         the results directory (default rsdrill-results): junit.xml, summary.md,
#                       and report.html + result.json of the experiment (or of each test's run,
#                       under runs/<test>/)
#   RSDRILL_EXTRAS      rsdrill's extras to install, e.g. "kubernetes" or "all" (default none)
#   RSDRILL_INSTALL     what to pip install (default: this checkout with RSDRILL_EXTRAS);
#                       "none" uses the rsdrill already installed
# rsdrill's own variables pass through as they are (RSDRILL_ALLOW, RSDRILL_METRICS_PUSH, ...).
# Outputs, where $GITHUB_OUTPUT is set: exit-code, out, report, junit, summary.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
experiment=${RSDRILL_EXPERIMENT:-}
suite=${RSDRILL_PYTEST:-}
out=${RSDRILL_OUT:-rsdrill-results}
extras=${RSDRILL_EXTRAS:-}
install=${RSDRILL_INSTALL:-}

say() { printf 'rsdrill-ci: %s\n' "$*" >&2; }

if [[ -n "$experiment" && -n "$suite" ]] || [[ -z "$experiment" && -z "$suite" ]]; then
  say "set exactly one of RSDRILL_EXPERIMENT (an experiment file) and RSDRILL_PYTEST (an SLO suite)"
  exit 2
fi

if [[ -z "$install" ]]; then
  install="$(dirname "$here")${extras:+[$extras]}"
fi
if [[ "$install" != none ]]; then
  packages=("$install")
  [[ -n "$suite" ]] && packages+=(pytest)  # the suite's runner (rsdrill's plugin comes along)
  say "installing ${packages[*]}"
  python -m pip install --quiet "${packages[@]}" || { say "pip install failed"; exit 4; }
fi
command -v rsdrill >/dev/null || { say "rsdrill is not installed (RSDRILL_INSTALL=none)"; exit 4; }

mkdir -p "$out"
# A self-hosted runner keeps yesterday's results: a run refused today (exit 2, nothing written)
# put yesterday's summary on today's job page, and its junit.xml in the test view.
rm -f "$out"/{result.json,junit.xml,report.html,summary.md,history.jsonl} "$out"/runs/*/summary.md
if [[ -n "$experiment" ]]; then
  rsdrill run "$experiment" --no-live --no-history --out "$out"
  status=$?
  summaries=("$out/summary.md")
  report="$out/report.html"
else
  # The suite's arguments are words, as on a command line.
  read -r -a words <<<"$suite"
  python -m pytest "${words[@]}" --rsdrill-out "$out/runs" --junitxml "$out/junit.xml"
  status=$?
  summaries=("$out"/runs/*/summary.md)
  report="$out/runs"
fi

for summary in "${summaries[@]}"; do
  [[ -f "$summary" ]] || continue
  cat "$summary"
  if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
    cat "$summary" >>"$GITHUB_STEP_SUMMARY"
  fi
done

if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
  {
    echo "exit-code=$status"
    echo "out=$out"
    echo "report=$report"
    echo "junit=$out/junit.xml"
    echo "summary=${summaries[0]}"
  } >>"$GITHUB_OUTPUT"
fi
say "exit status $status"
exit "$status"
