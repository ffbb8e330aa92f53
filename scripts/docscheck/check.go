package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Tools are the commands under cmd/ whose flags the docs may name.
var Tools = []string{"train", "batcher", "eval", "infer"}

// otherFlags are flags the docs name for commands that are not towerrl's tools (mpirun, srun,
// go test); a flag in a code span attached to no tool must be one of these or some tool's.
var otherFlags = []string{
	"bind-to", "oversubscribe", "allow-run-as-root", "tag-output", // mpirun
	"nodes", "ntasks-per-node", "cpus-per-task", // srun
	"help",    // every Go program's flag package
	"dry-run", // scripts/gpu_check.sh
}

// Problem is one thing wrong in a page: where, and what.
type Problem struct {
	File string // relative to the repository root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Page is a Markdown file split into what the checks read.
type Page struct {
	Path    string   // relative to the repository root, slash-separated
	Lines   []string // the whole file
	Anchors []string // GitHub's anchors of its headings
	Links   []Ref    // link targets outside code
	Code    []Ref    // inline code spans outside blocks, and lines of shell code blocks
	Snips   []Snip   // go code blocks
}

// Ref is a piece of text and the line it is on.
type Ref struct {
	Line int
	Text string
}

// Snip is a go code block and the test file that the paragraph before it names first, if any.
type Snip struct {
	Line   int
	Source string // the first *_test.go path in the paragraph before the block; "" if none
	Lines  []string
}

var (
	linkRE   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	spanRE   = regexp.MustCompile("`([^`]+)`")
	sourceRE = regexp.MustCompile(`[\w./-]+_test\.go`)
	headRE   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// Parse reads a Markdown page.
func Parse(path string, text string) Page {
	p := Page{Path: path, Lines: strings.Split(text, "\n")}
	inBlock, lang, blockStart := false, "", 0
	cont := 0 // the line of the shell command a trailing backslash continues; 0: none
	var block []string
	seen := map[string]int{}
	for i, line := range p.Lines {
		n := i + 1
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") {
			if !inBlock {
				inBlock, lang, blockStart, block = true, strings.TrimSpace(strings.TrimPrefix(trim, "```")), n, nil
				continue
			}
			inBlock = false
			if lang == "go" {
				// The paragraph right before the block names its source first.
				j := blockStart - 2
				for j >= 0 && strings.TrimSpace(p.Lines[j]) == "" {
					j--
				}
				k := j
				for k > 0 && strings.TrimSpace(p.Lines[k-1]) != "" {
					k--
				}
				src := ""
				if j >= 0 {
					src = sourceRE.FindString(strings.Join(p.Lines[k:j+1], " "))
				}
				p.Snips = append(p.Snips, Snip{Line: blockStart, Source: src, Lines: block})
			}
			continue
		}
		if inBlock {
			block = append(block, line)
			if lang == "" || lang == "sh" || lang == "bash" || lang == "console" {
				if k := len(p.Code) - 1; k >= 0 && p.Code[k].Line == cont {
					p.Code[k].Text = strings.TrimSuffix(p.Code[k].Text, "\\") + " " + line
				} else {
					p.Code = append(p.Code, Ref{n, line})
				}
				if strings.HasSuffix(trim, "\\") {
					cont = p.Code[len(p.Code)-1].Line
				} else {
					cont = 0
				}
			}
			continue
		}
		if m := headRE.FindStringSubmatch(line); m != nil {
			a := Anchor(m[1])
			if k := seen[a]; k > 0 {
				p.Anchors = append(p.Anchors, fmt.Sprintf("%s-%d", a, k))
			} else {
				p.Anchors = append(p.Anchors, a)
			}
			seen[a]++
		}
		// Inline code first: a link inside a code span is not a link.
		rest := spanRE.ReplaceAllStringFunc(line, func(s string) string {
			p.Code = append(p.Code, Ref{n, strings.Trim(s, "`")})
			return ""
		})
		for _, m := range linkRE.FindAllStringSubmatch(rest, -1) {
			p.Links = append(p.Links, Ref{n, m[1]})
		}
	}
	return p
}

// Anchor is GitHub's anchor for a heading: inline code marks and links reduced to their text,
// lower case, letters, digits, spaces, hyphens and underscores kept, spaces made hyphens.
func Anchor(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// CheckLinks reports relative links whose file, or whose anchor in a Markdown file, does not
// exist. pages holds every parsed page by path, for anchors.
func CheckLinks(root string, p Page, pages map[string]Page) []Problem {
	var out []Problem
	for _, l := range p.Links {
		t := l.Text
		if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(t, "#")
		target := p.Path
		if file != "" {
			target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.Path), file)))
			if _, err := os.Stat(filepath.Join(root, target)); err != nil {
				out = append(out, Problem{p.Path, l.Line, fmt.Sprintf("link %q: %s does not exist", t, target)})
				continue
			}
		}
		if anchor == "" {
			continue
		}
		tp, ok := pages[target]
		if !ok {
			if !strings.HasSuffix(target, ".md") {
				out = append(out, Problem{p.Path, l.Line, fmt.Sprintf("link %q: an anchor into a file that is not Markdown", t)})
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, target))
			if err != nil {
				out = append(out, Problem{p.Path, l.Line, fmt.Sprintf("link %q: %v", t, err)})
				continue
			}
			tp = Parse(target, string(b))
		}
		if !slices.Contains(tp.Anchors, anchor) {
			out = append(out, Problem{p.Path, l.Line, fmt.Sprintf("link %q: %s has no heading with anchor #%s (it has: %s)", t, target, anchor, strings.Join(tp.Anchors, ", "))})
		}
	}
	return out
}

var (
	toolRE = regexp.MustCompile(`^(?:\./)?(?:bin/|cmd/|\./cmd/|.*/bin/)?(train|batcher|eval|infer)$`)
	flagRE = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)(?:=.*)?$`)
)

// ToolFlags returns the flags a command text names: (tool, flag) for the flags that follow a
// tool's name (bin/train, train, ./cmd/train ...) up to the end of that command (|, &&, ;, &,
// a # comment, or another command), and ("", flag) for flags at the start of a text that
// names no command (a code span such as `--head`). Flags of other commands are skipped, and a
// tool's name right after a flag is that flag's value (`--infer bin/infer`), not a command.
func ToolFlags(text string) [][2]string {
	var out [][2]string
	tool := "" // "": at a command's start; "-": another command's words; else the tool
	prev := ""
	for _, tok := range strings.Fields(text) {
		afterFlag := strings.HasPrefix(prev, "-") && !strings.Contains(prev, "=")
		prev = tok
		if strings.HasPrefix(tok, "#") {
			break
		}
		switch tok {
		case "|", "||", "&&", ";", "&", "then", "do", "else":
			tool = ""
			continue
		}
		clean := strings.TrimRight(strings.TrimLeft(tok, "[("), "]),;:.")
		if m := toolRE.FindStringSubmatch(clean); m != nil && !afterFlag {
			tool = m[1]
		} else if m := flagRE.FindStringSubmatch(clean); m != nil {
			if tool != "-" {
				out = append(out, [2]string{tool, m[1]})
			}
		} else if tool == "" && !strings.HasPrefix(clean, "-") {
			tool = "-"
		}
		if strings.HasSuffix(tok, ";") || strings.HasSuffix(tok, "&") {
			tool = ""
		}
	}
	return out
}

// HelpFlags parses a Go flag package's usage text: the names of its "  -name" lines.
func HelpFlags(help string) map[string]bool {
	flags := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  -") {
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			flags[name] = true
		}
	}
	return flags
}

// CheckFlags reports tool flags the page names that the tool's help does not list, and flags
// attached to no tool that no tool and no known other command has.
func CheckFlags(p Page, help map[string]map[string]bool) []Problem {
	var out []Problem
	for _, c := range p.Code {
		for _, tf := range ToolFlags(c.Text) {
			tool, flag := tf[0], tf[1]
			if tool != "" {
				if !help[tool][flag] {
					out = append(out, Problem{p.Path, c.Line, fmt.Sprintf("%s has no flag --%s (in %q)", tool, flag, strings.Join(strings.Fields(c.Text), " "))})
				}
				continue
			}
			known := slices.Contains(otherFlags, flag)
			for _, h := range help {
				known = known || h[flag]
			}
			if !known {
				out = append(out, Problem{p.Path, c.Line, fmt.Sprintf("no tool has a flag --%s (in %q)", flag, strings.Join(strings.Fields(c.Text), " "))})
			}
		}
	}
	return out
}

// CheckSnippets reports lines of go code blocks that are not in the test file named before
// them (the docs quote Example functions; a quote that drifts from its source fails).
func CheckSnippets(root string, p Page) []Problem {
	var out []Problem
	for _, s := range p.Snips {
		if s.Source == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, s.Source))
		if err != nil {
			out = append(out, Problem{p.Path, s.Line, fmt.Sprintf("go block quotes %s: %v", s.Source, err)})
			continue
		}
		have := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			have[strings.TrimSpace(l)] = true
		}
		for i, l := range s.Lines {
			if t := strings.TrimSpace(l); t != "" && !have[t] {
				out = append(out, Problem{p.Path, s.Line + 1 + i, fmt.Sprintf("go block line %q is not in %s", t, s.Source)})
			}
		}
	}
	return out
}

// CheckPaths reports scripts/, configs/ and testdata/ files named in code that do not exist,
// and make targets named in code that the Makefile lacks.
func CheckPaths(root string, p Page, targets map[string]bool) []Problem {
	var out []Problem
	pathRE := regexp.MustCompile(`(?:^|[\s(=])((?:scripts|configs|testdata)/[\w./-]*\.\w+)`)
	makeRE := regexp.MustCompile(`(?:^|[\s(;&])make ([a-z][\w-]*)`)
	for _, c := range p.Code {
		for _, m := range pathRE.FindAllStringSubmatch(c.Text, -1) {
			path := strings.TrimRight(m[1], ".,:;")
			if _, err := os.Stat(filepath.Join(root, path)); err != nil {
				out = append(out, Problem{p.Path, c.Line, fmt.Sprintf("%s does not exist", path)})
			}
		}
		for _, m := range makeRE.FindAllStringSubmatch(c.Text, -1) {
			if !targets[m[1]] {
				out = append(out, Problem{p.Path, c.Line, fmt.Sprintf("the Makefile has no target %q", m[1])})
			}
		}
	}
	return out
}

// MakeTargets lists a Makefile's targets.
func MakeTargets(makefile string) map[string]bool {
	t := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][\w-]*):`).FindAllStringSubmatch(makefile, -1) {
		t[m[1]] = true
	}
	return t
}

// DirectModules lists the modules go.mod requires without an // indirect comment.
func DirectModules(gomod string) []string {
	var mods []string
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "require (":
			inBlock = true
			continue
		case inBlock && t == ")":
			inBlock = false
			continue
		}
		if !inBlock {
			var ok bool
			if t, ok = strings.CutPrefix(t, "require "); !ok {
				continue
			}
		}
		if f := strings.Fields(t); len(f) >= 2 && !strings.Contains(t, "// indirect") && !strings.HasPrefix(t, "//") {
			mods = append(mods, f[0])
		}
	}
	return mods
}

var goRefRE = regexp.MustCompile(`(?:\.\./)*docs/[\w./-]*\w\.md|\bDESIGN\.md`)

// CheckGoRefs reports the pages that comments and strings in the Go files under root point at
// (docs/X.md, ../../docs/X.md) and that do not exist, and any mention of DESIGN.md, which the
// repository does not hold. Generated files (*.pb.go), URLs and this checker's own folder
// (whose tests name pages that do not exist on purpose) are skipped.
func CheckGoRefs(root string) ([]Problem, error) {
	var out []Problem
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "out" || n == "runs" || n == "bin" ||
				filepath.ToSlash(rel) == "scripts/docscheck") { // this checker's own examples
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			for _, loc := range goRefRE.FindAllStringIndex(line, -1) {
				ref := line[loc[0]:loc[1]]
				if loc[0] > 0 && strings.ContainsAny(line[loc[0]-1:loc[0]], "/.") {
					continue // a URL's path or another folder's docs/
				}
				if ref == "DESIGN.md" {
					out = append(out, Problem{filepath.ToSlash(rel), i + 1, "names DESIGN.md, which is not in the repository (docs/ has the pages)"})
					continue
				}
				target := filepath.Join(root, ref)
				if strings.HasPrefix(ref, "../") {
					target = filepath.Join(filepath.Dir(path), ref)
				}
				if _, err := os.Stat(target); err != nil {
					out = append(out, Problem{filepath.ToSlash(rel), i + 1, fmt.Sprintf("names %s, which does not exist", ref)})
				}
			}
		}
		return nil
	})
	return out, err
}
