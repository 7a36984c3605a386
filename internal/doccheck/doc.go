// Package doccheck holds the tests that keep flagdown's documentation a front door and a map: the
// README stays at most ReadmeMaxLines lines and names the two commands, no page under docs/ grows
// past PageMaxLines lines, docs/README.md indexes every page, and every relative link of the README
// and of docs/ names a file that exists and, with a #fragment, a heading of that file.
package doccheck

// ReadmeMaxLines is the most lines README.md may have: what flagdown is, the two commands, a
// five-minute walkthrough, the folder map and links; everything else lives in docs/.
const ReadmeMaxLines = 300

// PageMaxLines is the most lines one Markdown page under docs/ may have.
const PageMaxLines = 600
