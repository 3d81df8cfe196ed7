package config

import (
	"errors"
	"math"
	"strconv"
)

// MetaQ reads every number in server.ini through the Aviator expression
// engine (MetaConfig.getInt/getLong), so operators write things like
// maxSegmentSize=1024*1024*1024. evalInt accepts the integer subset of that
// language: decimal or 0x hex literals, + - * / %, unary + and -, and
// parentheses, with Java's truncating division. Anything else (a decimal
// point, a variable, a function) is refused: Aviator would produce a Double
// or a nil and MetaQ would stop with a ClassCastException.

var errExpr = errors.New("not an integer expression")

type exprParser struct {
	s   string
	pos int
}

// evalInt evaluates s as an integer expression.
func evalInt(s string) (int64, error) {
	p := &exprParser{s: s}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	p.space()
	if p.pos != len(p.s) {
		return 0, errExpr
	}
	return v, nil
}

func (p *exprParser) space() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

func (p *exprParser) sum() (int64, error) {
	v, err := p.product()
	if err != nil {
		return 0, err
	}
	for {
		p.space()
		if p.pos >= len(p.s) || (p.s[p.pos] != '+' && p.s[p.pos] != '-') {
			return v, nil
		}
		op := p.s[p.pos]
		p.pos++
		w, err := p.product()
		if err != nil {
			return 0, err
		}
		if op == '+' {
			if (w > 0 && v > math.MaxInt64-w) || (w < 0 && v < math.MinInt64-w) {
				return 0, errors.New("integer overflow")
			}
			v += w
		} else {
			if (w < 0 && v > math.MaxInt64+w) || (w > 0 && v < math.MinInt64+w) {
				return 0, errors.New("integer overflow")
			}
			v -= w
		}
	}
}

func (p *exprParser) product() (int64, error) {
	v, err := p.unary()
	if err != nil {
		return 0, err
	}
	for {
		p.space()
		if p.pos >= len(p.s) || (p.s[p.pos] != '*' && p.s[p.pos] != '/' && p.s[p.pos] != '%') {
			return v, nil
		}
		op := p.s[p.pos]
		p.pos++
		w, err := p.unary()
		if err != nil {
			return 0, err
		}
		switch op {
		case '*':
			if v != 0 && w != 0 {
				r := v * w
				if r/w != v || (v == -1 && w == math.MinInt64) || (w == -1 && v == math.MinInt64) {
					return 0, errors.New("integer overflow")
				}
				v = r
			} else {
				v = 0
			}
		case '/', '%':
			if w == 0 {
				return 0, errors.New("division by zero")
			}
			if op == '/' {
				v /= w
			} else {
				v %= w
			}
		}
	}
}

func (p *exprParser) unary() (int64, error) {
	p.space()
	if p.pos < len(p.s) && (p.s[p.pos] == '-' || p.s[p.pos] == '+') {
		neg := p.s[p.pos] == '-'
		p.pos++
		v, err := p.unary()
		if err != nil {
			return 0, err
		}
		if neg {
			if v == math.MinInt64 {
				return 0, errors.New("integer overflow")
			}
			v = -v
		}
		return v, nil
	}
	return p.primary()
}

func (p *exprParser) primary() (int64, error) {
	p.space()
	if p.pos >= len(p.s) {
		return 0, errExpr
	}
	if p.s[p.pos] == '(' {
		p.pos++
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		p.space()
		if p.pos >= len(p.s) || p.s[p.pos] != ')' {
			return 0, errExpr
		}
		p.pos++
		return v, nil
	}
	start := p.pos
	base := 10
	if p.pos+1 < len(p.s) && p.s[p.pos] == '0' && (p.s[p.pos+1] == 'x' || p.s[p.pos+1] == 'X') {
		base = 16
		p.pos += 2
		start = p.pos
	}
	for p.pos < len(p.s) && isDigit(p.s[p.pos], base) {
		p.pos++
	}
	if p.pos == start {
		return 0, errExpr
	}
	lit := p.s[start:p.pos]
	// Aviator allows an 'l'/'L' suffix on long literals.
	if p.pos < len(p.s) && (p.s[p.pos] == 'l' || p.s[p.pos] == 'L') {
		p.pos++
	}
	// A letter or '.' straight after a number (1.5, 10s) is not an integer.
	if p.pos < len(p.s) && (p.s[p.pos] == '.' || isLetter(p.s[p.pos])) {
		return 0, errExpr
	}
	v, err := strconv.ParseInt(lit, base, 64)
	if err != nil {
		return 0, errors.New("integer overflow")
	}
	return v, nil
}

func isDigit(c byte, base int) bool {
	if c >= '0' && c <= '9' {
		return true
	}
	if base == 16 {
		return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
	}
	return false
}

func isLetter(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
}
