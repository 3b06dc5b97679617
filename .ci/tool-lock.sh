# Sourced by the .ci/install-* scripts that build a tool from source. `.ci/run` builds them in
# the background while the tests run, and a test that needs one runs its script too: the second
# waits here for the first, then finds the tool built.
tool_lock() {
  mkdir -p .cache/tools
  exec 9>".cache/tools/.install-$1.lock"
  flock 9
}
