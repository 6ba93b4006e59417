# tclsh with threads: each worker builds lists and strings, results joined.
package require Thread
set ids {}
for {set t 0} {$t < 6} {incr t} {
    lappend ids [thread::create -joinable {
        proc work {n} {
            set l {}
            for {set i 0} {$i < 40000} {incr i} { lappend l [string repeat $i [expr {$i % 9}]] }
            return [string length [join $l ,]]
        }
        thread::wait
    }]
}
set results {}
foreach id $ids { lappend results [thread::send $id {work 1}] }
foreach id $ids { thread::release $id }
foreach id $ids { thread::join $id }
puts $results
