# Sourced by scripts/test: the headless browser the dashboard's tests drive (tests/dashboard/),
# Debian's chromium with its matching chromedriver; Selenium itself comes from the test extra.
# Quick on a second run. Exports MQCORE_CHROMIUM and MQCORE_CHROMEDRIVER.
ensure_chromium() {
    if { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; } \
            && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test: installing chromium and chromium-driver (the dashboard's browser tests)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium chromium-driver fonts-dejavu-core >/dev/null
    fi
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
        echo "scripts/test: chromium and chromedriver are needed for tests/dashboard (Debian: apt-get install" >&2
        echo "  chromium chromium-driver)" >&2
        return 1
    fi
    export MQCORE_CHROMIUM=$(command -v chromium) MQCORE_CHROMEDRIVER=$(command -v chromedriver)
}
ensure_chromium
