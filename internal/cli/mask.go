package cli

import (
	"regexp"
	"strings"
)

// Mask replaces a secret wherever lockgate shows a setting's value
// (`config print`, configuration errors).
const Mask = "****"

// secretWords mark a setting whose whole value is a secret (or names one:
// --auth-tokens-file is masked too; a path is cheap to hide and costly to
// leak if someone puts the token itself there).
var secretWords = []string{"token", "password", "secret"}

var (
	// scheme://user:password@host → scheme://user:****@host
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):[^@/\s]*@`)
	// password=… in a key/value DSN or a URL query
	kvPassword = regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|token)=([^\s&,;]*)`)
)

// IsSecret reports whether a setting's whole value must be masked: its
// name contains token, password or secret.
func IsSecret(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// maskValue returns value as it may be shown: Mask for a secret setting
// (when set), and otherwise with the passwords inside URLs and key=value
// strings replaced (postgres://u:pw@h/db → postgres://u:****@h/db).
func maskValue(name, value string) string {
	if IsSecret(name) {
		if value == "" || value == "[]" {
			return value
		}
		return Mask
	}
	value = urlPassword.ReplaceAllString(value, "${1}:"+Mask+"@")
	return kvPassword.ReplaceAllString(value, "${1}="+Mask)
}
