//go:build unix

package manifest

import "syscall"

// oNoFollow makes opening a host file fail when its last component is a
// symlink, closing the gap between listing a tree and opening its files.
const oNoFollow = syscall.O_NOFOLLOW
