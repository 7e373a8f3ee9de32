package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"gopkg.in/yaml.v3"
)

// openAPIYAML is the hand-written OpenAPI 3 document of the whole API; a test
// checks it against the registered routes and `make lint` runs Redocly on it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON converts the embedded document to JSON once. The document is
// part of the binary, so a failure is a build defect caught by the tests.
func openAPIJSON() []byte {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		panic(fmt.Sprintf("api/openapi.yaml: %v", err))
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("api/openapi.yaml to JSON: %v", err))
	}
	return b
}

// openAPI serves the document at /api/v1/openapi.json.
func (s *Server) openAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json; charset=utf-8", s.openapi)
}
