package methods

import (
	"fmt"
	"testing"
)

// ViewVars renders the media root, its cache and paths in the cache into
// the view, and leaves other paths alone.
func TestViewVars(t *testing.T) {
	vars := map[string]string{
		"media": "/m", "sequence_info": "/m/sequence_info", "folder:esm1v": "/m/sequence_info/esm1v",
		"model_dir": "/m/models/b", "tools": "/opt/tools", "target": "kcat", "other": "/media2/sequence_info",
		"methodj_cache_dir": "/m/sequence_info/methodj_contacts",
	}
	ViewVars(vars, MediaView{MediaRoot: "/m", Root: "/m/jobs/j/view/stage-0", Keep: map[string]bool{"methodj_cache_dir": true}})
	want := map[string]string{
		"media": "/m/jobs/j/view/stage-0", "sequence_info": "/m/jobs/j/view/stage-0/sequence_info",
		"folder:esm1v": "/m/jobs/j/view/stage-0/sequence_info/esm1v",
		"model_dir":    "/m/models/b", "tools": "/opt/tools", "target": "kcat", "other": "/media2/sequence_info",
		"methodj_cache_dir": "/m/sequence_info/methodj_contacts",
	}
	if fmt.Sprint(vars) != fmt.Sprint(want) {
		t.Errorf("vars %v\nwant %v", vars, want)
	}
}
