package input

import (
	"fmt"
	"strings"
)

// SyntaxError says why a SMILES or InChI string is not well formed.
type SyntaxError struct {
	// Pos is the 0-based byte offset of the problem in the checked text.
	Pos int
	Msg string
}

// Error implements error.
func (e *SyntaxError) Error() string { return fmt.Sprintf("position %d: %s", e.Pos, e.Msg) }

func synErr(pos int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// elements are the symbols a bracket atom may use (IUPAC, Z = 1..118).
var elements = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Fields(`H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni
		Cu Zn Ga Ge As Se Br Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd
		Pm Sm Eu Gd Tb Dy Ho Er Tm Yb Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U
		Np Pu Am Cm Bk Cf Es Fm Md No Lr Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og`) {
		m[s] = true
	}
	return m
}()

// aromaticBracket are the lowercase symbols accepted inside brackets.
var aromaticBracket = map[string]bool{"b": true, "c": true, "n": true, "o": true, "p": true, "s": true,
	"se": true, "as": true, "te": true, "si": true}

type smilesTok int

const (
	tStart smilesTok = iota
	tAtom
	tBond
	tOpen
	tClose
	tDot
	tRing
)

// maxRingNumber bounds %(n) ring-closure numbers, as RDKit does (5 digits).
const maxRingNumber = 99999

// CheckSMILES checks that s is well-formed SMILES (OpenSMILES with RDKit's
// extensions): organic-subset and bracket atoms (isotope, element or
// aromatic symbol, `*`, `#n`, chirality, H count, charge, atom class),
// bonds (- = # $ : / \), balanced non-empty branches, ring closures (digits,
// %nn and %(n)) that are all closed, never close on the same atom and never
// duplicate a bond, and dot-separated fragments. As RDKit does, leading
// whitespace is ignored and anything after the first whitespace is a name.
// It checks syntax only, not valences or aromaticity (RDKit does that when
// installed). It never panics and returns a *SyntaxError.
func CheckSMILES(s string) error {
	s = strings.TrimLeft(s, " \t\r\n\v\f")
	if i := strings.IndexAny(s, " \t\r\n\v\f"); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return synErr(0, "empty SMILES")
	}
	type ringOpen struct{ atom, pos int }
	var (
		last, beforeLast = tStart, tStart
		prev             = -1 // the atom the next bond starts from
		atoms            int
		stack            []int
		rings            = map[int]ringOpen{}
		bonds            = map[[2]int]bool{}
	)
	addBond := func(a, b int) bool {
		if a > b {
			a, b = b, a
		}
		k := [2]int{a, b}
		if bonds[k] {
			return false
		}
		bonds[k] = true
		return true
	}
	set := func(t smilesTok) { beforeLast, last = last, t }
	afterAtomish := func() bool { return last == tAtom || last == tRing || last == tClose }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '[' || c == '*' || isOrganicStart(c):
			n, err := atomLen(s, i)
			if err != nil {
				return err
			}
			if prev >= 0 {
				addBond(prev, atoms)
			}
			prev = atoms
			atoms++
			i += n
			set(tAtom)
		case strings.IndexByte(`-=#$:/\`, c) >= 0:
			if !afterAtomish() && last != tOpen {
				return synErr(i, "bond %q must follow an atom", c)
			}
			i++
			set(tBond)
		case c == '(':
			if !afterAtomish() {
				return synErr(i, "branch must follow an atom")
			}
			stack = append(stack, prev)
			i++
			set(tOpen)
		case c == ')':
			if len(stack) == 0 {
				return synErr(i, "unbalanced ')'")
			}
			if !afterAtomish() {
				return synErr(i, "empty branch or dangling bond before ')'")
			}
			prev = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			i++
			set(tClose)
		case c == '.':
			if !afterAtomish() {
				return synErr(i, "'.' must separate two fragments")
			}
			if len(stack) > 0 {
				return synErr(i, "'.' inside a branch")
			}
			prev = -1
			i++
			set(tDot)
		case c >= '0' && c <= '9' || c == '%':
			if !(afterAtomish() || (last == tBond && beforeLast != tOpen)) {
				return synErr(i, "ring closure must follow an atom")
			}
			num, n, err := ringNumber(s, i)
			if err != nil {
				return err
			}
			if o, ok := rings[num]; ok {
				if o.atom == prev {
					return synErr(i, "ring closure %d bonds an atom to itself", num)
				}
				if !addBond(o.atom, prev) {
					return synErr(i, "ring closure %d duplicates a bond", num)
				}
				delete(rings, num)
			} else {
				rings[num] = ringOpen{atom: prev, pos: i}
			}
			i += n
			set(tRing)
		default:
			return synErr(i, "unexpected character %q", rune(s[i]))
		}
	}
	switch {
	case last == tBond:
		return synErr(len(s), "bond without a second atom")
	case last == tDot:
		return synErr(len(s), "'.' must separate two fragments")
	case len(stack) > 0:
		return synErr(len(s), "unclosed branch '('")
	case len(rings) > 0:
		first := len(s)
		for _, o := range rings {
			first = min(first, o.pos)
		}
		return synErr(first, "unclosed ring bond")
	}
	return nil
}

func isOrganicStart(c byte) bool {
	return strings.IndexByte("BCNOPSFIbcnops", c) >= 0
}

// atomLen returns the length of the atom starting at s[i].
func atomLen(s string, i int) (int, error) {
	c := s[i]
	switch {
	case c == '*':
		return 1, nil
	case c == 'B' && i+1 < len(s) && s[i+1] == 'r', c == 'C' && i+1 < len(s) && s[i+1] == 'l':
		return 2, nil
	case c != '[':
		return 1, nil
	}
	j := i + 1
	digits := func(maxN int) int {
		k := 0
		for j < len(s) && s[j] >= '0' && s[j] <= '9' && k < maxN {
			j++
			k++
		}
		return k
	}
	digits(9) // isotope
	if j >= len(s) {
		return 0, synErr(i, "unclosed '['")
	}
	switch c := s[j]; {
	case c == '*':
		j++
	case c == '#':
		j++
		if digits(3) == 0 {
			return 0, synErr(j, "'#' needs an atomic number")
		}
	case c >= 'A' && c <= 'Z':
		if j+1 < len(s) && s[j+1] >= 'a' && s[j+1] <= 'z' && elements[s[j:j+2]] {
			j += 2
		} else if elements[s[j:j+1]] {
			j++
		} else {
			return 0, synErr(j, "unknown element")
		}
	case c >= 'a' && c <= 'z':
		if j+1 < len(s) && aromaticBracket[s[j:min(j+2, len(s))]] {
			j += 2
		} else if aromaticBracket[s[j:j+1]] {
			j++
		} else {
			return 0, synErr(j, "unknown aromatic element")
		}
	default:
		return 0, synErr(j, "bracket atom needs an element symbol")
	}
	// Chirality: @, @@, or @TH/@AL/@SP/@TB/@OH with a number.
	if j < len(s) && s[j] == '@' {
		j++
		if j < len(s) && s[j] == '@' {
			j++
		} else if j+1 < len(s) {
			switch s[j : j+2] {
			case "TH", "AL", "SP", "TB", "OH":
				j += 2
				if digits(2) == 0 {
					return 0, synErr(j, "chirality class needs a number")
				}
			}
		}
	}
	if j < len(s) && s[j] == 'H' {
		j++
		digits(2)
	}
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		sign := s[j]
		j++
		if j < len(s) && s[j] == sign {
			j++
		} else {
			digits(2)
		}
	}
	if j < len(s) && s[j] == ':' {
		j++
		if digits(9) == 0 {
			return 0, synErr(j, "atom class needs a number")
		}
	}
	if j >= len(s) || s[j] != ']' {
		return 0, synErr(j, "malformed bracket atom")
	}
	return j + 1 - i, nil
}

// ringNumber parses a ring-closure number at s[i]: a digit, %nn or %(n).
func ringNumber(s string, i int) (num, n int, err error) {
	if s[i] != '%' {
		return int(s[i] - '0'), 1, nil
	}
	if i+1 < len(s) && s[i+1] == '(' {
		j := i + 2
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			num = num*10 + int(s[j]-'0')
			j++
			if num > maxRingNumber {
				return 0, 0, synErr(i, "ring-closure number too large")
			}
		}
		if j == i+2 || j >= len(s) || s[j] != ')' {
			return 0, 0, synErr(i, "malformed %%(n) ring closure")
		}
		return num, j + 1 - i, nil
	}
	if i+2 < len(s) && isDigit(s[i+1]) && isDigit(s[i+2]) {
		num = int(s[i+1]-'0')*10 + int(s[i+2]-'0')
		if num == 0 {
			return 0, 0, synErr(i, "ring-closure number %%00")
		}
		return num, 3, nil
	}
	return 0, 0, synErr(i, "'%%' needs two digits")
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// CheckInChI is a basic shape check of an InChI string: the prefix
// "InChI=1S/" (standard) or "InChI=1/", then non-empty '/'-separated layers
// of printable ASCII without whitespace. It does not check chemistry.
func CheckInChI(s string) error {
	s = strings.TrimSpace(s)
	var rest string
	switch {
	case strings.HasPrefix(s, "InChI=1S/"):
		rest = s[len("InChI=1S/"):]
	case strings.HasPrefix(s, "InChI=1/"):
		rest = s[len("InChI=1/"):]
	default:
		return synErr(0, "InChI must start with InChI=1S/")
	}
	if rest == "" {
		return synErr(len(s), "InChI has no layers")
	}
	base := len(s) - len(rest)
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c <= ' ' || c > '~' {
			return synErr(base+i, "invalid character in InChI")
		}
		if c == '/' && (i == len(rest)-1 || rest[i+1] == '/') {
			return synErr(base+i, "empty InChI layer")
		}
	}
	return nil
}
