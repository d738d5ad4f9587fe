package redact

import (
	"io"
	"strconv"
	"strings"
)

// Mask replaces a password wherever this package shows one.
const Mask = "***"

// RedisAddr returns addr, a host:port or a redis:// URL, with the URL's
// password replaced by [Mask]. A URL that does not parse is masked too: the
// password is found the way a URL parser finds it, as what follows the first
// ':' of the userinfo (the text before the last '@' of the authority).
func RedisAddr(addr string) string {
	_, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return addr
	}
	start := len(addr) - len(rest)
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return addr
	}
	user, _, hasPass := strings.Cut(authority[:at], ":")
	if !hasPass {
		return addr
	}
	return addr[:start] + user + ":" + Mask + addr[start+at:]
}

// DSN returns dsn, a go-sql-driver/mysql DSN
// ([user[:password]@][net[(addr)]]/dbname[?params]), with the password
// replaced by [Mask]. As the driver does, it takes the userinfo to end at the
// last '@' before the last '/', so a DSN that does not parse is masked too.
func DSN(dsn string) string {
	head := dsn
	if i := strings.LastIndex(dsn, "/"); i >= 0 {
		head = dsn[:i]
	}
	at := strings.LastIndex(head, "@")
	if at < 0 {
		return dsn
	}
	user, _, hasPass := strings.Cut(head[:at], ":")
	if !hasPass {
		return dsn
	}
	return user + ":" + Mask + dsn[at:]
}

// Text returns s with every password of settings (Redis addresses or MySQL
// DSNs, as the user gave them) masked, wherever a setting or its password
// is quoted in s: errors of URL and DSN parsers quote the whole setting. A
// password is only looked for between the ':' and '@' that frame it, so a
// short password does not mask unrelated text.
func Text(s string, settings ...string) string {
	return mask(s, passwords(settings))
}

// minBare is the length from which a password is masked wherever it
// appears, not only between ':' and '@': a shorter one would mask ordinary
// text (a password "1" would hide every digit 1).
const minBare = 4

// mask replaces each of passwords framed by ':' and '@' in s, as it is and
// as %q quotes it.
func mask(s string, passwords []string) string {
	for _, p := range passwords {
		if len(p) >= minBare {
			// Wherever it stands: an error may quote it alone.
			s = strings.ReplaceAll(s, p, Mask)
		}
		s = strings.ReplaceAll(s, ":"+p+"@", ":"+Mask+"@")
		if q := strconv.Quote(p); q[1:len(q)-1] != p {
			s = strings.ReplaceAll(s, ":"+q[1:len(q)-1]+"@", ":"+Mask+"@")
		}
	}
	return s
}

// passwords returns the non-empty passwords in settings.
func passwords(settings []string) []string {
	var out []string
	for _, set := range settings {
		for _, masked := range []string{RedisAddr(set), DSN(set)} {
			if p := password(set, masked); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// password returns what masked replaced with [Mask] in set, or "".
func password(set, masked string) string {
	if masked == set {
		return ""
	}
	i := strings.Index(masked, ":"+Mask+"@")
	if i < 0 {
		return ""
	}
	start := i + 1
	end := len(set) - (len(masked) - (start + len(Mask)))
	if end <= start {
		return ""
	}
	return set[start:end]
}

// Writer returns a writer that writes to w what it is given with the
// passwords of settings masked (see [Text]). Each Write is masked on its
// own: a password split across two writes is not found, so print a line per
// write, as fmt and log/slog do.
func Writer(w io.Writer, settings ...string) io.Writer {
	ps := passwords(settings)
	if len(ps) == 0 {
		return w
	}
	return &writer{w: w, passwords: ps}
}

type writer struct {
	w         io.Writer
	passwords []string
}

func (m *writer) Write(b []byte) (int, error) {
	if _, err := io.WriteString(m.w, mask(string(b), m.passwords)); err != nil {
		return 0, err
	}
	return len(b), nil
}
