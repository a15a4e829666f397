//go:build !unix

package manifest

// oNoFollow is 0 where the platform has no O_NOFOLLOW; the Lstat checks
// before opening still refuse symlinks.
const oNoFollow = 0
