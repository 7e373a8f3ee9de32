package api

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/kinflow/kinflow/internal/usermsg"
)

// userMessageMax is the longest failure message a user is shown. A failure
// can carry a long error chain (a disk-full error listing every file it
// could not write ran to 7,000 characters and a 25 KB status body); the
// first sentences say what went wrong, and the worker's log ("job failed",
// with the job id) and the job row keep the full text for operators.
const userMessageMax = 300

// serverPath matches an absolute file path of two or more segments (the
// media root, a temporary folder, a program's location).
var serverPath = regexp.MustCompile(`/[^\s:'"(),;\[\]{}<>]+(?:/[^\s:'"(),;\[\]{}<>]+)+/?`)

// userMessage is a job or stage message as users see it: a database
// outage named as such and nothing more, connection strings and addresses
// replaced by "[server address]" (usermsg.Redact), server paths by
// "[server path]", runs of them collapsed, and cut to userMessageMax
// characters. Applied when the message is shown, so a message an older
// worker stored is redacted too.
func userMessage(msg string) string {
	out := serverPath.ReplaceAllString(usermsg.Redact(msg), "[server path]")
	for strings.Contains(out, "[server path], [server path]") {
		out = strings.ReplaceAll(out, "[server path], [server path]", "[server path]")
	}
	for strings.Contains(out, "[server path] [server path]") {
		out = strings.ReplaceAll(out, "[server path] [server path]", "[server path]")
	}
	if utf8.RuneCountInString(out) > userMessageMax {
		r := []rune(out)
		out = strings.TrimSpace(string(r[:userMessageMax-1])) + "…"
	}
	return out
}
