#!/usr/bin/env bash
# Offline prerequisites of the docs site and of its browser test (tests/test_docs.py):
#   * KaTeX (JS, CSS, fonts) from Debian's libjs-katex / fonts-katex, copied into
#     docs/assets/katex/ so the site serves its own math renderer (no CDN, no network
#     at build or view time);
#   * Debian's headless-capable `chromium`, which the browser test drives through
#     Playwright (Playwright's own browser downloads are never used).
# Idempotent and fast when already done (two file tests and one cmp). Installing needs
# root (CI runs as root on a fresh Debian machine); otherwise it prints the apt command.
set -euo pipefail
cd "$(dirname "$0")/.."

KATEX_JS=/usr/share/javascript/katex      # libjs-katex
KATEX_FONTS=/usr/share/fonts/truetype/katex  # fonts-katex
DEST=docs/assets/katex

missing=()
[ -f "$KATEX_JS/katex.min.js" ] && [ -f "$KATEX_JS/katex.min.css" ] || missing+=(libjs-katex)
[ -d "$KATEX_FONTS" ] || missing+=(fonts-katex)
[ -x /usr/bin/chromium ] || missing+=(chromium)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup_katex: installing ${missing[*]} (Debian packages)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup_katex: missing ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
    # KaTeX is needed to build the site at all; chromium only for the browser test,
    # which names the same fix when it cannot find the browser.
    if [ ! -f "$KATEX_JS/katex.min.js" ] || [ ! -d "$KATEX_FONTS" ]; then exit 1; fi
  fi
fi

# Copy (dereferencing Debian's symlinks) only when the copy is absent or stale.
if [ -f "$DEST/katex.min.js" ] && cmp -s "$KATEX_JS/katex.min.js" "$DEST/katex.min.js" \
   && cmp -s "$KATEX_JS/katex.min.css" "$DEST/katex.min.css" && [ -d "$DEST/fonts" ]; then
  exit 0
fi
rm -rf "$DEST"
mkdir -p "$DEST/fonts"
cp -L "$KATEX_JS/katex.min.js" "$KATEX_JS/katex.min.css" "$DEST/"
# katex.min.css lists woff2, woff and ttf for every face (url(fonts/...)); browsers fetch
# the first format they support, but all three are copied so no listed URL is dangling.
cp -L "$KATEX_FONTS"/KaTeX_* "$DEST/fonts/"
echo "setup_katex: KaTeX $(grep -o 'version:"[0-9.]*"' "$DEST/katex.min.js" | head -1 | cut -d'"' -f2) copied to $DEST" >&2
