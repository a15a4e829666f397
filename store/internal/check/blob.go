package check

import "strings"

// maxBlobName bounds a blob's name.
const maxBlobName = 512

// BlobName checks a blob's name as store.Blobs defines it: segments of
// letters, digits and . _ - joined by "/", none empty, none starting with
// a dot (so none is "." or ".."). A name is also a path under a data
// directory (store/blobdir): this is what keeps it there.
func BlobName(name string) error {
	if name == "" || len(name) > maxBlobName {
		return Invalid("blob name %q: want 1 to %d characters", name, maxBlobName)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg[0] == '.' {
			return Invalid("blob name %q: a segment is empty or starts with a dot", name)
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				return Invalid("blob name %q: %q is not a letter, digit, '.', '_' or '-'", name, r)
			}
		}
	}
	return nil
}
