package config

import (
	"iter"
	"strings"

	"gopkg.in/ini.v1"
)

// rawKey is one key=value line, remembering which file it came from so that
// errors in an overlay name the overlay.
type rawKey struct {
	Name, Value, File string
}

// rawSection is one [section] with its keys in file order. Repeated sections
// are merged into the first; a repeated key keeps its last value.
type rawSection struct {
	Name string
	File string
	Keys []rawKey
}

func (s *rawSection) get(name string) (rawKey, bool) {
	for _, k := range s.Keys {
		if k.Name == name {
			return k, true
		}
	}
	return rawKey{}, false
}

func (s *rawSection) set(k rawKey) {
	for i := range s.Keys {
		if s.Keys[i].Name == k.Name {
			s.Keys[i] = k
			return
		}
	}
	s.Keys = append(s.Keys, k)
}

type rawIni struct {
	Sections []*rawSection
}

func (r *rawIni) section(name string) *rawSection {
	for _, s := range r.Sections {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// iniOptions make gopkg.in/ini.v1 read a file the way MetaQ's ini4j does:
// ';' and '#' only start comment lines, never a comment inside a value
// (deleteWhen holds '?' and may hold '#'; a path may hold ';'); quotes
// around a value are kept; a key with no '=' is a blank value; repeated
// sections and keys are reported instead of silently merged; and dots in
// section names ("topic=a.b") do not create parent sections.
var iniOptions = ini.LoadOptions{
	IgnoreInlineComment:        true,
	PreserveSurroundedQuote:    true,
	AllowBooleanKeys:           true,
	AllowNonUniqueSections:     true,
	AllowShadows:               true,
	AllowDuplicateShadowValues: true,
	PreserveEmptyShadowValues:  true,
	ChildSectionDelimiter:      "\x00",
	KeyValueDelimiters:         "=:",
}

// readIni parses data. Syntax errors become Errors; repeated sections and
// keys, and keys before the first section, become warnings.
func readIni(file string, data []byte, p *problems) *rawIni {
	f, err := ini.LoadSources(iniOptions, data)
	if err != nil {
		p.errorf(file, "", "", "", "a file in INI syntax (%v)", err)
		return nil
	}
	bare := bareKeys(data)
	out := &rawIni{}
	for _, sec := range f.Sections() {
		name := strings.TrimSpace(sec.Name())
		if name == ini.DefaultSection {
			for _, k := range sec.Keys() {
				p.warnf(file, "", k.Name(), "key outside any section is ignored")
			}
			continue
		}
		rs := out.section(name)
		if rs == nil {
			rs = &rawSection{Name: name, File: file}
			out.Sections = append(out.Sections, rs)
		} else {
			p.warnf(file, name, "", "section appears more than once; its keys are merged, later values win")
		}
		for _, k := range sec.Keys() {
			vals := k.ValueWithShadows()
			val := k.Value()
			if len(vals) > 0 {
				val = vals[len(vals)-1]
			}
			shown := val
			if IsSecretKey(name, k.Name()) {
				shown = hiddenValue // warnings end up in logs
			}
			if len(vals) > 1 {
				p.warnf(file, name, k.Name(), "key appears %d times; the last value %q wins", len(vals), shown)
			} else if _, dup := rs.get(k.Name()); dup {
				p.warnf(file, name, k.Name(), "key appears more than once; the last value %q wins", shown)
			}
			if k.Value() == "true" && bare[name+"\x00"+k.Name()] {
				// AllowBooleanKeys reports a bare "key" line as "true";
				// ini4j gives it no value, which MetaQ treats as blank.
				val = ""
			}
			rs.set(rawKey{Name: k.Name(), Value: strings.TrimSpace(val), File: file})
		}
	}
	return out
}

// bareKeys finds "key" lines with no delimiter, per section, so that they can
// be told apart from an explicit key=true (ini.v1 reports both as "true").
func bareKeys(data []byte) map[string]bool {
	out := map[string]bool{}
	for section, line := range KeyLines(data) {
		if section == "" {
			section = ini.DefaultSection
		}
		if !strings.ContainsAny(line, "=:") {
			out[section+"\x00"+line] = true
		}
	}
	return out
}

// KeyLines yields every line of an ini file that is not blank, a comment or
// a [section] header, trimmed, with the section it stands in ("" before the
// first header).
func KeyLines(data []byte) iter.Seq2[string, string] {
	return func(yield func(section, line string) bool) {
		section := ""
		for line := range strings.SplitSeq(string(data), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case line == "" || line[0] == ';' || line[0] == '#':
			case line[0] == '[':
				if end := strings.LastIndexByte(line, ']'); end > 0 {
					section = strings.TrimSpace(line[1:end])
				}
			default:
				if !yield(section, line) {
					return
				}
			}
		}
	}
}

// overlayOnto copies every key of over into base, creating sections that
// base lacks. Keys keep the overlay's file name for error messages.
func overlayOnto(base, over *rawIni) {
	for _, os := range over.Sections {
		bs := base.section(os.Name)
		if bs == nil {
			bs = &rawSection{Name: os.Name, File: os.File}
			base.Sections = append(base.Sections, bs)
		}
		for _, k := range os.Keys {
			bs.set(k)
		}
	}
}
