package server

import "testing"

// TestE2BPauseMemorySDK runs testdata/e2b/pausememory.test.mjs: pause
// with memory on the gvisor tier through the unmodified E2B JS SDK
// (betaPause and connect, keepMemory false, autoPause with autoResume),
// envd and ports reached by host name and by E2B_SANDBOX_URL's headers.
func TestE2BPauseMemorySDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	needGVisor(t, es.testServer)
	key := es.e2bKey(t, "pausememsdk")
	es.runSuite(t, sdk, key, "pausememory.test.mjs")
}
