package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
)

// inHome is the Home tab, when it is shown.
const inHome = `//main[@id='home' and not(@hidden)]`

// The playground has the app's Home tab: it lists the call waiting for a
// decision, its link opens the call's thread, and Approve there decides
// it — the call runs once, and the tab shows it among the person's
// recent decisions instead.
func TestPlaygroundHomeTabInBrowser(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/from-home" {
			hits.Add(1)
		}
		fmt.Fprint(w, "deployed")
	}))
	defer target.Close()
	bot := startPlayground(t)
	p := page{t: t, tab: newBrowser(t)}
	p.open(bot.open)
	p.send("/agent fetch " + target.URL + "/from-home")
	p.waitText(inThread, "Approval needed: http_request")

	p.do("opening the Home tab", chromedp.Click(chromedp.ID("sidebar-home"), chromedp.NodeVisible))
	p.waitText(inHome, "Waiting for your decision")
	p.waitText(inHome, "GET "+target.URL+"/from-home")
	p.waitText(inHome, "Requested by @You in #playground")
	screenshot(t, p.tab, "home-pending")

	// The tab's link opens the thread in the channel; back to the tab.
	p.do("following the link to the thread", chromedp.Click(inHome+`//a[normalize-space()='Open the thread']`, chromedp.NodeVisible))
	p.waitText(inThread, "Approval needed: http_request")
	p.do("opening the Home tab again", chromedp.Click(chromedp.ID("sidebar-home"), chromedp.NodeVisible))
	p.waitText(inHome, "GET "+target.URL+"/from-home")
	if n := hits.Load(); n != 0 {
		t.Fatalf("the call ran %d times before anyone approved it", n)
	}

	p.click(inHome, "Approve")
	p.waitText(inHome, "Approved http_request in #playground")
	if n := hits.Load(); n != 1 {
		t.Errorf("the call approved in the Home tab ran %d times, want 1", n)
	}
	if n := p.count(button(inHome, "Approve")); n != 0 {
		t.Errorf("the Home tab still has %d Approve buttons after the approval", n)
	}
	screenshot(t, p.tab, "home-decided")
	p.do("back to the channel", chromedp.Click(chromedp.ID("sidebar-channel"), chromedp.NodeVisible))
	p.waitText(inThread, "Approved by @You")
	p.waitText(inThread, "Done: the request to "+target.URL+"/from-home")
}
