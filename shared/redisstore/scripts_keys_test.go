package redisstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// builtKeys are the keys scripts build in Lua instead of receiving them in KEYS, by the local that
// holds each ("dir/file.lua local", dir under shared/), with the reason. Each is built from the
// store's prefix, whose hash tag puts it in the slot of the declared keys on a Redis Cluster
// (CheckPrefix). A key construction not listed here fails TestScriptsDeclareTheirKeys, and so does
// an entry no script uses any more.
var builtKeys = map[string]string{
	"redisstore/ping.lua ride_pos_key":     "the live position of the ride the driver hash holds: the ride id is read inside the script",
	"redisstore/assign.lua old_pos_key":    "the live position of the ride the driver leaves: the ride id is read from his hash inside the script",
	"redisstore/join_batch.lua timer_key":  "the batch timer's name carries Redis's clock (TIME), read inside the script",
	"redisstore/hail.lua found_driver_key": "the hash of a driver the press concerns: the presser, or a driver only the GEOSEARCH finds",
	"redisstore/hail.lua found_hb_key":     "the heartbeat of a driver the press concerns (found by the GEOSEARCH)",
	"redisstore/hail.lua found_offer_key":  "the offer lock of a driver the press concerns (found by the GEOSEARCH)",
	"redisstore/hail.lua held_driver_key":  "the hash of the paired driver, who may be the one the GEOSEARCH found",
}

// keyArgs tells which arguments of a Redis command (after its name) are keys: "first", "all" or
// "none". A command not listed fails the test until it is classified here.
var keyArgs = map[string]string{
	"TIME": "none",
	"DEL":  "all", "UNLINK": "all", "EXISTS": "all", "MGET": "all", "TOUCH": "all",
	"GET": "first", "SET": "first", "PEXPIRE": "first", "EXPIRE": "first", "PEXPIREAT": "first",
	"PTTL": "first", "TTL": "first", "PEXPIRETIME": "first", "INCR": "first", "INCRBY": "first",
	"HGET": "first", "HSET": "first", "HMGET": "first", "HDEL": "first", "HINCRBY": "first",
	"HEXISTS": "first", "HGETALL": "first",
	"SADD": "first", "SREM": "first", "SISMEMBER": "first", "SMEMBERS": "first",
	"ZADD": "first", "ZREM": "first", "ZSCORE": "first", "ZRANGE": "first", "ZRANGEBYSCORE": "first",
	"ZREMRANGEBYSCORE": "first", "ZCOUNT": "first", "ZCARD": "first",
	"GEOADD": "first", "GEOSEARCH": "first", "GEOPOS": "first",
}

// TestScriptsDeclareTheirKeys reads every Lua script of the shared packages (shared/*/scripts/*.lua)
// and holds that each key a redis.call or redis.pcall touches is declared in KEYS: it is KEYS[...]
// itself, a local set from KEYS[...], or a parameter of a function every caller of which passes
// such a key (followed through the snippets of the same folder). Keys a script must build are
// listed, with the reason, in builtKeys; any other construction (a prefix from ARGV, a
// concatenation, a value read from Redis) fails, so does a command the test cannot classify.
// Redis Cluster routes a script by its KEYS and refuses (or misroutes) any other key.
func TestScriptsDeclareTheirKeys(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "*", "scripts", "*.lua"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string][]*luaFile{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Base(filepath.Dir(filepath.Dir(f)))
		lf := &luaFile{name: pkg + "/" + filepath.Base(f), toks: luaTokens(string(src))}
		lf.index()
		dirs[pkg] = append(dirs[pkg], lf)
	}
	for _, want := range []string{"redisstore", "ratelimit"} {
		if len(dirs[want]) == 0 {
			t.Fatalf("no scripts found in shared/%s/scripts", want)
		}
	}
	used := map[string]bool{}
	var problems []string
	for _, fs := range dirs {
		c := &keyCheck{files: fs, used: used, seen: map[string]bool{}}
		for _, f := range fs {
			c.checkCalls(f)
		}
		problems = append(problems, c.problems...)
	}
	for k := range builtKeys {
		if !used[k] {
			problems = append(problems, fmt.Sprintf("builtKeys lists %q, which no script builds any more: remove it", k))
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) == 0 && len(used) != len(builtKeys) {
		t.Fatalf("used %d built keys, listed %d", len(used), len(builtKeys))
	}
}

// luaToken is one Lua token: kind 'n' name, 's' string (text without quotes), 'x' number, 'p'
// punctuation or operator.
type luaToken struct {
	kind byte
	text string
	line int
}

// luaTokens splits src into tokens, dropping comments and white space.
func luaTokens(src string) []luaToken {
	var out []luaToken
	line := 1
	i := 0
	longClose := func(j int) (string, int) { // at '[', returns the closing bracket and the length of the opening
		k := j + 1
		for k < len(src) && src[k] == '=' {
			k++
		}
		if k < len(src) && src[k] == '[' {
			return "]" + strings.Repeat("=", k-j-1) + "]", k - j + 1
		}
		return "", 0
	}
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(src[i:], "--"):
			if cl, n := longClose(i + 2); n > 0 && src[i+2] == '[' {
				end := strings.Index(src[i+2+n:], cl)
				if end < 0 {
					end = len(src) - i - 2 - n
				}
				body := src[i : i+2+n+end]
				line += strings.Count(body, "\n")
				i += 2 + n + end + len(cl)
				continue
			}
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '\'' || c == '"':
			j := i + 1
			var b strings.Builder
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && j+1 < len(src) {
					j++
				}
				b.WriteByte(src[j])
				j++
			}
			out = append(out, luaToken{'s', b.String(), line})
			i = j + 1
		case c == '[':
			if cl, n := longClose(i); n > 0 {
				end := strings.Index(src[i+n:], cl)
				if end < 0 {
					end = len(src) - i - n
				}
				out = append(out, luaToken{'s', src[i+n : i+n+end], line})
				line += strings.Count(src[i:i+n+end], "\n")
				i += n + end + len(cl)
				continue
			}
			out = append(out, luaToken{'p', "[", line})
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			out = append(out, luaToken{'n', src[i:j], line})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.' || src[j] == 'x' || src[j] >= 'a' && src[j] <= 'f' || src[j] >= 'A' && src[j] <= 'F') {
				j++
			}
			out = append(out, luaToken{'x', src[i:j], line})
			i = j
		default:
			op := string(c)
			for _, long := range []string{"...", "..", "==", "~=", "<=", ">="} {
				if strings.HasPrefix(src[i:], long) {
					op = long
					break
				}
			}
			out = append(out, luaToken{'p', op, line})
			i += len(op)
		}
	}
	return out
}

// luaFunc is a function definition: its name ("" when anonymous), parameters and body tokens.
type luaFunc struct {
	name       string
	params     []string
	start, end int // body token range [start, end)
}

// luaDef is one assignment of a name: the tokens of the expression given it (nil when the name is
// set otherwise, e.g. by a for loop).
type luaDef struct {
	expr []luaToken
	at   int
}

type luaFile struct {
	name  string
	toks  []luaToken
	funcs []luaFunc
	defs  map[string][]luaDef
}

func (f *luaFile) tok(i int) luaToken {
	if i < 0 || i >= len(f.toks) {
		return luaToken{}
	}
	return f.toks[i]
}

func (f *luaFile) is(i int, text string) bool {
	t := f.tok(i)
	return (t.kind == 'n' || t.kind == 'p') && t.text == text
}

// index finds the file's functions and the assignments of its names.
func (f *luaFile) index() {
	f.defs = map[string][]luaDef{}
	for i, t := range f.toks {
		if t.kind == 'n' && t.text == "function" {
			j := i + 1
			name := ""
			for f.tok(j).kind == 'n' || f.is(j, ".") || f.is(j, ":") {
				name = f.tok(j).text
				j++
			}
			var params []string
			if f.is(j, "(") {
				for j++; j < len(f.toks) && !f.is(j, ")"); j++ {
					if f.tok(j).kind == 'n' {
						params = append(params, f.tok(j).text)
					}
				}
			}
			f.funcs = append(f.funcs, luaFunc{name: name, params: params, start: j + 1, end: f.blockEnd(j + 1)})
		}
		if t.kind == 'p' && t.text == "=" {
			names := []string{}
			j := i - 1
			for f.tok(j).kind == 'n' {
				names = append([]string{f.tok(j).text}, names...)
				if !f.is(j-1, ",") {
					break
				}
				j -= 2
			}
			if f.is(j-1, "for") {
				for _, n := range names {
					f.defs[n] = append(f.defs[n], luaDef{at: i})
				}
				continue
			}
			exprs := f.exprList(i + 1)
			for k, n := range names {
				var e []luaToken
				if k < len(exprs) {
					e = exprs[k]
				}
				f.defs[n] = append(f.defs[n], luaDef{expr: e, at: i})
			}
		}
		if t.kind == 'n' && t.text == "in" { // for k, v in ...: names set by an iterator
			for j := i - 1; f.tok(j).kind == 'n' && !f.is(j, "for"); j -= 2 {
				f.defs[f.tok(j).text] = append(f.defs[f.tok(j).text], luaDef{at: i})
				if !f.is(j-1, ",") {
					break
				}
			}
		}
	}
}

// blockEnd returns the index of the "end" closing the block whose body starts at i.
func (f *luaFile) blockEnd(i int) int {
	depth := 1
	for ; i < len(f.toks); i++ {
		if f.tok(i).kind != 'n' {
			continue
		}
		switch f.tok(i).text {
		case "function", "if", "do", "repeat":
			depth++
		case "end", "until":
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(f.toks)
}

// exprList splits the expressions from i (the right side of an assignment) at top-level commas;
// the list ends at the end of its line, or a keyword starting another statement, outside brackets.
func (f *luaFile) exprList(i int) [][]luaToken {
	var out [][]luaToken
	var cur []luaToken
	depth := 0
	line := f.tok(i).line
	for ; i < len(f.toks); i++ {
		t := f.toks[i]
		if depth == 0 && (t.line != line || t.kind == 'n' && (t.text == "then" || t.text == "else" || t.text == "elseif" ||
			t.text == "end" || t.text == "do" || t.text == "local" || t.text == "return") || t.kind == 'p' && t.text == ";") {
			break
		}
		switch {
		case t.kind == 'p' && (t.text == "(" || t.text == "[" || t.text == "{"):
			depth++
		case t.kind == 'p' && (t.text == ")" || t.text == "]" || t.text == "}"):
			depth--
		case depth == 0 && t.kind == 'p' && t.text == ",":
			out = append(out, cur)
			cur = nil
			continue
		}
		if depth > 0 {
			line = t.line // a bracket carries the expression to the next lines
		}
		cur = append(cur, t)
	}
	return append(out, cur)
}

// args returns the argument expressions of the call whose "(" is at i, and the index of its ")".
func (f *luaFile) args(i int) ([][]luaToken, int) {
	var out [][]luaToken
	var cur []luaToken
	depth := 0
	for i++; i < len(f.toks); i++ {
		t := f.toks[i]
		switch {
		case t.kind == 'p' && (t.text == "(" || t.text == "[" || t.text == "{"):
			depth++
		case t.kind == 'p' && (t.text == ")" || t.text == "]" || t.text == "}"):
			if depth == 0 {
				if cur != nil {
					out = append(out, cur)
				}
				return out, i
			}
			depth--
		case depth == 0 && t.kind == 'p' && t.text == ",":
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	return out, i
}

// enclosing returns the innermost function whose body holds token i, nil at the top level.
func (f *luaFile) enclosing(i int) *luaFunc {
	var best *luaFunc
	for k := range f.funcs {
		fn := &f.funcs[k]
		if fn.start <= i && i < fn.end && (best == nil || fn.start > best.start) {
			best = fn
		}
	}
	return best
}

type keyCheck struct {
	files    []*luaFile
	used     map[string]bool
	seen     map[string]bool
	problems []string
}

func (c *keyCheck) fail(f *luaFile, at int, format string, a ...any) {
	c.problems = append(c.problems, fmt.Sprintf("%s:%d: ", f.name, f.tok(at).line)+fmt.Sprintf(format, a...))
}

// checkCalls checks the key arguments of every redis.call and redis.pcall of f.
func (c *keyCheck) checkCalls(f *luaFile) {
	for i := range f.toks {
		if !f.is(i, "redis") || !f.is(i+1, ".") || !(f.is(i+2, "call") || f.is(i+2, "pcall")) {
			continue
		}
		if !f.is(i+3, "(") {
			c.fail(f, i, "redis.%s is not called directly: the test cannot see which keys it touches", f.tok(i+2).text)
			continue
		}
		args, _ := f.args(i + 3)
		if len(args) == 0 || len(args[0]) != 1 || args[0][0].kind != 's' {
			c.fail(f, i, "redis.%s with a command that is not a string literal", f.tok(i+2).text)
			continue
		}
		cmd := strings.ToUpper(args[0][0].text)
		var keys [][]luaToken
		switch keyArgs[cmd] {
		case "none":
		case "first":
			if len(args) > 1 {
				keys = args[1:2]
			}
		case "all":
			keys = args[1:]
		default:
			c.fail(f, i, "command %s is not classified in keyArgs: add which of its arguments are keys", cmd)
			continue
		}
		for _, k := range keys {
			c.checkKey(f, i, k, 0)
		}
	}
}

// checkKey checks that the key expression e, used at token at of f, comes from KEYS.
func (c *keyCheck) checkKey(f *luaFile, at int, e []luaToken, depth int) {
	if depth > 20 {
		c.fail(f, at, "key %s: origin too deep to follow", text(e))
		return
	}
	if len(e) >= 3 && e[0].kind == 'n' && e[0].text == "KEYS" && e[1].text == "[" && e[len(e)-1].text == "]" {
		return
	}
	if len(e) != 1 || e[0].kind != 'n' {
		c.fail(f, at, "key %s is built in the script: declare it in KEYS, or name it a local and list it in builtKeys with the reason", text(e))
		return
	}
	name := e[0].text
	if fn := f.enclosing(at); fn != nil {
		for p, param := range fn.params {
			if param == name {
				c.checkParam(f, fn, p, at, depth)
				return
			}
		}
	}
	defs := f.defs[name]
	if len(defs) == 0 {
		c.fail(f, at, "key %s: no assignment of it in the file", name)
		return
	}
	for _, d := range defs {
		switch {
		case d.expr == nil:
			c.fail(f, d.at, "key %s is set by a loop or left unset, not from KEYS", name)
		case len(d.expr) >= 3 && d.expr[0].text == "KEYS" && d.expr[1].text == "[" && d.expr[len(d.expr)-1].text == "]":
		case len(d.expr) == 1 && d.expr[0].kind == 'n':
			c.checkKey(f, d.at, d.expr, depth+1)
		default:
			k := f.name + " " + name
			if _, ok := builtKeys[k]; ok {
				c.used[k] = true
				continue
			}
			c.fail(f, d.at, "key %s = %s is built in the script: declare it in KEYS, or list %q in builtKeys with the reason", name, text(d.expr), k)
		}
	}
}

// checkParam checks that every call of fn (in any file of the folder) passes a key from KEYS as
// its parameter p.
func (c *keyCheck) checkParam(f *luaFile, fn *luaFunc, p, at, depth int) {
	if fn.name == "" {
		c.fail(f, at, "key %s is a parameter of an anonymous function: the test cannot follow its callers", fn.params[p])
		return
	}
	id := fmt.Sprintf("%s %s %d", f.name, fn.name, p)
	if c.seen[id] {
		return
	}
	c.seen[id] = true
	for _, g := range c.files {
		for i := range g.toks {
			if !g.is(i, fn.name) || !g.is(i+1, "(") || g.is(i-1, "function") || g.is(i-1, ".") || g.is(i-1, ":") {
				continue
			}
			args, _ := g.args(i + 1)
			if p >= len(args) {
				c.fail(g, i, "call of %s passes no key as its parameter %s", fn.name, fn.params[p])
				continue
			}
			c.checkKey(g, i, args[p], depth+1)
		}
	}
}

func text(e []luaToken) string {
	var b strings.Builder
	for i, t := range e {
		if i > 0 {
			b.WriteByte(' ')
		}
		if t.kind == 's' {
			b.WriteString("'" + t.text + "'")
		} else {
			b.WriteString(t.text)
		}
	}
	return b.String()
}
