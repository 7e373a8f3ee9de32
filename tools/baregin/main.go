// Command baregin serves one fixed JSON answer with a bare Gin engine: the
// baseline that scripts/bench-wrk.sh compares kinflow's status route with.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/gin-gonic/gin"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:8099", "listen address")
	flag.Parse()
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.GET("/status/:id/", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"jobId": c.Param("id"), "status": "Completed"})
	})
	log.Fatal(http.ListenAndServe(*addr, e))
}
