#!/usr/bin/env bash
# The share of the words of a text that are English words: each whitespace-separated word, lower-cased
# and stripped of leading and trailing punctuation (numbers left out), looked up in a word list
# (Debian's `wamerican`, /usr/share/dict/words, by default). Prints "dictionary words: K of N (P%)".
# With --samples, FILE is what `generate` prints ("=== prompt: P" lines, each followed by P and the
# sample): only the generated text counts, not the prompts.
#   scripts/word_share.sh [--samples] FILE [WORDLIST]
set -euo pipefail
SAMPLES=0
if [ "${1:-}" = "--samples" ]; then SAMPLES=1; shift; fi
TEXT="${1:?usage: word_share.sh [--samples] FILE [WORDLIST]}"
WORDS="${2:-/usr/share/dict/words}"
[ -r "$TEXT" ] || { echo "word_share.sh: cannot read $TEXT" >&2; exit 1; }
[ -r "$WORDS" ] || { echo "word_share.sh: no word list at $WORDS (Debian: apt-get install wamerican)" >&2; exit 1; }
awk -v samples="$SAMPLES" '
     NR == FNR { dict[tolower($0)] = 1; next }
     samples && /^=== prompt: / { prompt = substr($0, 13); strip = 1; next }
     {
       line = $0
       if (strip) { if (index(line, prompt) == 1) line = substr(line, length(prompt) + 1); strip = 0 }
       n = split(line, w, /[[:space:]]+/)
       for (i = 1; i <= n; ++i) {
         x = tolower(w[i]); gsub(/^[^a-z0-9]+|[^a-z0-9]+$/, "", x)
         if (x == "" || x ~ /^[0-9]+$/) continue
         ++total; if (x in dict) ++found
       }
     }
     END {
       if (total == 0) { print "dictionary words: no words"; exit 1 }
       printf "dictionary words: %d of %d (%.1f%%)\n", found, total, 100 * found / total
     }' "$WORDS" "$TEXT"
